# Batches and chains (issue 27): an outbox row carries its job's link (its batch, its place in
# a chain), relayed beside the record. "" for every existing row, and for a row a 0.5 process
# writes during a rolling deploy (the database's default): no link.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0005_pause_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxjob",
            name="link",
            # db_default: a 0.5 process still writing rows during the deploy leaves it out
            field=models.TextField(blank=True, db_default="", default=""),
        ),
    ]
