# The outbox table (models.OutboxJob, outbox.py).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_delayq", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxJob",
            fields=[
                ("id", models.CharField(max_length=26, primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=64)),
                ("due_at", models.DateTimeField()),
                ("relay_at", models.DateTimeField(db_index=True)),
                ("key", models.TextField(blank=True, null=True)),
                ("key_hash", models.CharField(blank=True, db_index=True, max_length=64, null=True)),
                ("on_conflict", models.CharField(default="replace", max_length=8)),
                ("record", models.BinaryField()),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "job waiting in the database",
                "verbose_name_plural": "jobs waiting in the database",
                "db_table": "django_delayq_outbox",
                "default_permissions": (),
                "indexes": [
                    models.Index(fields=["queue", "due_at"], name="delayq_outbox_queue_due")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("queue", "key_hash"), name="delayq_outbox_one_key"
                    )
                ],
            },
        ),
    ]
