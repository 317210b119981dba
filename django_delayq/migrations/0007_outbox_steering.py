# Steering through the outbox (issue 36): a row written by schedule(..., max_wait=...) keeps the
# call's cap and the first due time of its key's job; one written with group= keeps its group,
# relayed beside the record. All NULL for every existing row, and for a row a 0.7.0 process
# writes during a rolling deploy (it names none of these columns): such a row relays as before.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0006_outbox_link"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxjob",
            name="max_wait",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="outboxjob",
            name="first_due_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="outboxjob",
            name="group",
            field=models.TextField(blank=True, null=True),
        ),
    ]
