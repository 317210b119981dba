from typing import Any

from django.db import migrations, models

ROWS = 100  # orm_query reads pk 1..ROWS (benchmarks.tasks.ROWS)


def seed(apps: Any, schema_editor: Any) -> None:
    item = apps.get_model("benchmarks", "BenchItem")
    item.objects.bulk_create(item(name=f"item {i}", value=i) for i in range(1, ROWS + 1))


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="BenchItem",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=50)),
                ("value", models.IntegerField()),
            ],
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
