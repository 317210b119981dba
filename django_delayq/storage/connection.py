"""The Redis client and the Store built on it, cached per configuration.

``DELAYQ["REDIS_URL"]`` wins; otherwise the connection of the cache alias
``DELAYQ["CACHE"]`` is reused (django-redis, or Django's own ``RedisCache``).
Nothing connects at import time; the cache is dropped when settings change.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from django.core.signals import request_finished, setting_changed
from django.dispatch import receiver

from django_delayq.conf import delayq_settings
from django_delayq.exceptions import ConfigurationError
from django_delayq.storage.store import Store

_lock = threading.Lock()
_stores: dict[tuple, Store] = {}


def _cache_client(alias: str) -> redis.Redis:
    from django.core.cache import InvalidCacheBackendError, caches

    try:
        cache = caches[alias]
    except InvalidCacheBackendError:
        raise ConfigurationError(
            f"DELAYQ['CACHE'] is {alias!r}, but CACHES has no such alias: "
            "add it, or set DELAYQ['REDIS_URL']"
        ) from None
    backend = f"{type(cache).__module__}.{type(cache).__qualname__}"
    if backend.startswith("django_redis."):
        from django_redis import get_redis_connection

        return get_redis_connection(alias, write=True)
    if backend == "django.core.cache.backends.redis.RedisCache":
        return cache._cache.get_client(write=True)
    raise ConfigurationError(
        f"the cache {alias!r} uses {backend}, which is not Redis: point DELAYQ['CACHE'] at a "
        "django_redis.cache.RedisCache or django.core.cache.backends.redis.RedisCache alias, "
        "or set DELAYQ['REDIS_URL']"
    )


def make_client() -> redis.Redis:
    url = delayq_settings.REDIS_URL
    if url:
        if delayq_settings.CLUSTER:
            return redis.RedisCluster.from_url(url)
        return redis.Redis.from_url(url)
    return _cache_client(delayq_settings.CACHE)


def get_store() -> Store:
    """The Store for the current settings (one per configuration and process)."""
    config: tuple[Any, ...] = (
        delayq_settings.REDIS_URL,
        delayq_settings.CLUSTER,
        delayq_settings.CACHE,
        delayq_settings.PREFIX,
    )
    store = _stores.get(config)
    if store is None:
        with _lock:
            store = _stores.get(config)
            if store is None:
                store = Store(make_client(), prefix=delayq_settings.PREFIX)
                _stores[config] = store
    return store


def reset() -> None:
    """Forget cached clients (settings changed, or a test swapped Redis)."""
    with _lock:
        _stores.clear()


@receiver(setting_changed)
def _on_setting_changed(setting: str, **kwargs: Any) -> None:
    if setting in ("DELAYQ", "CACHES"):
        reset()


@receiver(request_finished)
def _on_request_finished(**kwargs: Any) -> None:
    """A request's thread gives back the connection its schedule() calls held (the
    transport keeps one per thread between calls): an idle web thread holds none, as after
    0.7's calls, so a pool sized to the server's threads is enough."""
    for store in list(_stores.values()):
        store.transport.close()
