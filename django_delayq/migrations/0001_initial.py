from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.CharField(max_length=26, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "delayed job",
                "verbose_name_plural": "delayed jobs",
                "permissions": [
                    ("cancel_job", "Can cancel pending delayed jobs"),
                    ("run_job", "Can run pending delayed jobs now"),
                    ("requeue_job", "Can requeue dead delayed jobs"),
                ],
                "managed": False,
                "default_permissions": ("view", "delete"),
            },
        ),
    ]
