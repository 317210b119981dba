# Batches and chains (issue 27): an outbox row carries its job's link (its batch, its place in
# a chain), relayed beside the record. "" for every existing row: no link.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0005_pause_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxjob",
            name="link",
            field=models.TextField(blank=True, default=""),
        ),
    ]
