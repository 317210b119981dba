"""The lists' search (``?q=`` on the pending, in progress, dead and finished lists): which
jobs match a query, read in bounded chunks, and which of the jobs an action was confirmed
on still match.

What matches: the query (spaces around it dropped) is found, ignoring case (``casefold``:
"MÜLLER" finds "müller"), inside one of the job's

- id;
- task name (a Django Task's own path is in its arguments);
- unique key;
- arguments, as the JSON text the record stores (compact, non-ASCII characters as they
  are, a string's quotes and backslashes escaped): ``{"customer_id":42}`` for the keyword
  arguments, ``42,"x"`` for the positional ones. ``customer_id=42`` (how a list shows a
  keyword argument) also finds ``"customer_id":42``.

A substring, not a word: ``42`` finds ``142`` too.

What it costs: one search reads at most :data:`SEARCH_LIMIT` jobs of the set, from the
rank it starts at (``?from=``, 0: the first the list shows), :data:`SEARCH_CHUNK` per
round trip (ZRANGE by rank, then one HMGET of their records, never their states or
errors), so a request costs the same with a million jobs in the set; the page says where
it stopped. Before that it looks the query up as an exact job id and as an exact unique key
(one fetch, one HGET): a job found so is shown first wherever it is in the set.

The finished list's kept jobs are searched the same way: the record framed inside each kept
entry is split out (sets.kept_record), never decoded whole.

Jobs waiting in the database outbox (beyond ``HORIZON``) are not searched: Redis only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_delayq.admin import sets
from django_delayq.exceptions import CorruptJob
from django_delayq.jobs.arguments import dumps
from django_delayq.jobs.record import decode_record, split_record
from django_delayq.storage.milliseconds import ms
from django_delayq.storage.reads import RawJob
from django_delayq.storage.store import Store

SEARCH_LIMIT = 10_000  # jobs one search reads at most (and an "all matching" action acts on)
SEARCH_CHUNK = 1_000  # jobs read per round trip
MAX_QUERY = 1024  # characters of a query used (a unique key's length limit)
MAX_ID = 64  # a longer query is no job id: not looked up as one
_ARGUMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)", re.DOTALL)


def clean_query(query: str | None) -> str:
    return (query or "").strip()[:MAX_QUERY]


def needles(query: str) -> tuple[str, ...]:
    """What is looked for: the query, casefolded; for ``name=value`` also ``"name":value``."""
    query = clean_query(query)
    if not query:
        return ()
    found = [query.casefold()]
    argument = _ARGUMENT.fullmatch(query)
    if argument:
        found.append(f'"{argument[1]}":{argument[2]}'.casefold())
    return tuple(found)


def _found_in(looked_for: tuple[str, ...], text: str) -> bool:
    return any(needle in text for needle in looked_for)


def matches(looked_for: tuple[str, ...], job_id: str, record: bytes | None, task: str = "") -> bool:
    """Whether a job matches ``looked_for`` (:func:`needles`), and is of ``task`` if given.

    A format-3 record is split, not decoded: its body holds the task name and the argument
    texts as they are (the header's digits and flags are left out). A record of 0.1, whose
    JSON may escape non-ASCII text, and a damaged one are decoded."""
    in_id = _found_in(looked_for, job_id.casefold())
    if record is None:  # gone between the ZRANGE and the HMGET: only its id is known
        return in_id and not task
    legacy = record[:1] in (b"[", b"{")
    # A miss in the raw text is a miss (the common case: nothing more is decoded).
    raw_text = "" if in_id or legacy else record.decode("utf-8", "replace").casefold()
    if raw_text and not _found_in(looked_for, raw_text):
        return False
    parts = None if legacy else split_record(record)
    if parts is not None:
        key, body = parts
        if task and body.split(b"\n", 1)[0] != task.encode():
            return False
        texts = [body.decode("utf-8", "replace"), key.decode("utf-8", "replace") if key else ""]
        return in_id or any(_found_in(looked_for, text.casefold()) for text in texts)
    try:
        fields = decode_record(record)
    except CorruptJob:  # garbage: its raw text, or its id; no task to filter by
        return not task and (
            in_id or _found_in(looked_for, record.decode("utf-8", "replace").casefold())
        )
    if task and fields.task != task:
        return False
    texts = [fields.task, fields.key or "", dumps(fields.args)[1:-1], dumps(fields.kwargs)]
    return in_id or any(_found_in(looked_for, text.casefold()) for text in texts)


@dataclass
class Search:
    """What one search found: (id, score in ms) of the matches in the list's order (those
    found by exact id or key first), the ranks it read, and the jobs the query names that
    are in another set (``elsewhere``)."""

    query: str
    found: list[tuple[str, Any]]
    start: int
    end: int  # the first rank not read
    total: int  # the size of the set when the search began
    elsewhere: list[RawJob] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [job_id for job_id, _ in self.found]

    @property
    def searched(self) -> int:
        return self.end - self.start

    @property
    def more(self) -> bool:
        """Jobs remain after the ranks read (the search stopped at its limit)."""
        return self.end < self.total


def direct(store: Store, queue: str, query: str) -> list[RawJob]:
    """The jobs of ``queue`` whose id or unique key is ``query`` exactly, in any set (a
    finished one kept too, by its id: its unique key was freed when it ended)."""
    query = clean_query(query)
    hits: list[RawJob] = []
    by_id = store.fetch(queue, query, finished=True) if query and len(query) <= MAX_ID else None
    if by_id is not None:
        hits.append(by_id)
    key_id = store.id_for_key(queue, query) if query else None
    if key_id is not None and key_id != query:
        by_key = store.fetch(queue, key_id)
        if by_key is not None:
            hits.append(by_key)
    return hits


def finished_by_key(store: Store, queue: str, key: str) -> str | None:
    """The id of the newest kept finished job of ``queue`` whose unique key is ``key`` (a
    key is freed when its job ends, so only its record still says it), reading at most
    SEARCH_LIMIT kept jobs, SEARCH_CHUNK per round trip; None when none is."""
    raw_key = key.encode()
    for job_id, _, record in _scan(store, queue, sets.FINISHED, 0, SEARCH_LIMIT):
        if record and raw_key in record:
            parts = split_record(record)
            if parts is not None and parts[0] == raw_key:
                return job_id
    return None


def _scan(
    store: Store, queue: str, status: str, start: int, limit: int
) -> Iterator[tuple[str, Any, bytes | None]]:
    """(id, score, record) of at most ``limit`` jobs of one set from rank ``start`` on,
    SEARCH_CHUNK per round trip (ZRANGE by rank, then one HMGET of their records)."""
    pos, stop = start, start + limit
    while pos < stop:
        chunk = sets.ranks(store, queue, status, pos, min(SEARCH_CHUNK, stop - pos))
        if not chunk:  # the end of the set (a short chunk may be a set that moved meanwhile)
            return
        records = sets.records(store, queue, status, [job_id for job_id, _ in chunk])
        for (job_id, score), record in zip(chunk, records, strict=True):
            yield job_id, score, record
        pos += len(chunk)


def search(
    store: Store,
    queue: str,
    status: str,
    query: str,
    task: str = "",
    start: int = 0,
    limit: int | None = None,
) -> Search:
    """The jobs of one set matching ``query`` (and of ``task``), reading at most ``limit``
    (SEARCH_LIMIT) of them from rank ``start`` on, SEARCH_CHUNK per round trip."""
    limit = SEARCH_LIMIT if limit is None else limit
    looked_for = needles(query)
    result = Search(clean_query(query), [], start, start, sets.size(store, queue, status))
    if not looked_for:
        return result
    seen = set()
    for raw in direct(store, queue, query):
        record = sets.kept_record(raw.kept) if status == sets.FINISHED else raw.record
        if sets.list_of(raw) != status:
            result.elsewhere.append(raw)
        elif not task or matches(looked_for, raw.id, record, task):
            result.found.append((raw.id, None if raw.score is None else ms(raw.score)))
            seen.add(raw.id)
    read = 0
    for job_id, score, record in _scan(store, queue, status, start, limit):
        read += 1
        if job_id not in seen and matches(looked_for, job_id, record, task):
            result.found.append((job_id, score))
            seen.add(job_id)
    result.end = start + read
    return result


def still_matching(
    store: Store, queue: str, ids: Sequence[str], query: str, task: str = ""
) -> tuple[list[str], list[str]]:
    """``ids`` split into those that still match (or are gone: the action reports them) and
    those whose record no longer matches (replaced under their unique key meanwhile)."""
    looked_for = needles(query)
    if not looked_for and not task:
        return list(ids), []
    kept, changed = [], []
    for first in range(0, len(ids), SEARCH_CHUNK):
        chunk = ids[first : first + SEARCH_CHUNK]
        for job_id, record in zip(chunk, store.records(queue, chunk), strict=True):
            if record is None or _still(looked_for, job_id, record, task):
                kept.append(job_id)
            else:
                changed.append(job_id)
    return kept, changed


def _still(looked_for: tuple[str, ...], job_id: str, record: bytes, task: str) -> bool:
    if looked_for:
        return matches(looked_for, job_id, record, task)
    try:
        return decode_record(record).task == task
    except CorruptJob:
        return False


class Found(Sequence):
    """A search's matches as a sequence for django.core.paginator.Paginator: a page is one
    fetch of the page's jobs (three HMGETs), whatever the number of matches."""

    def __init__(self, store: Store, queue: str, status: str, found: list[tuple[str, Any]]):
        self.store, self.queue, self.status, self.found = store, queue, status, found

    def __len__(self) -> int:
        return len(self.found)

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("Found supports only contiguous slices")
        return sets.fetch_many(self.store, self.queue, self.status, self.found[index])
