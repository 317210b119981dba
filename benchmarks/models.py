"""The benchmark app's one model: a small table for the ``orm_query`` task to read."""

from django.db import models


class BenchItem(models.Model):
    """One of ``ROWS`` rows (seeded by the migration); ``orm_query`` reads one by pk."""

    name = models.CharField(max_length=50)
    value = models.IntegerField()

    def __str__(self) -> str:
        return self.name
