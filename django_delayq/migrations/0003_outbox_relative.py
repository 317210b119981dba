# The outbox's due times on the database's clock (outbox.py, outbox promise I7): whether a row's
# due_at came from a delay= (relays send the remaining delay) or an absolute at= time.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0002_outbox"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxjob",
            name="relative",
            field=models.BooleanField(default=False),
        ),
    ]
