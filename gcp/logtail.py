"""The deployed container's log lines from Cloud Logging while ``deploy`` waits, so a user sees the
model download's progress and any crash instead of a silent 20-minute wait.

Vertex AI writes a deployed model's container output to Cloud Logging under the endpoint's
monitored resource (``aiplatform.googleapis.com/Endpoint``, label ``endpoint_id``). Each poll asks
for the entries newer than the last one shown. Reading logs needs ``roles/logging.viewer``; without
it the tail says so once and stops, and the deployment goes on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from google.auth.credentials import AnonymousCredentials
from google.cloud import logging_v2

from gcp.deploy import Target

ENDPOINT_RESOURCE = "aiplatform.googleapis.com/Endpoint"
PAGE_SIZE = 200


def endpoint_filter(endpoint_name: str, after: datetime) -> str:
    endpoint_id = endpoint_name.rsplit("/", 1)[-1]
    stamp = after.isoformat().replace("+00:00", "Z")
    return (f'resource.type="{ENDPOINT_RESOURCE}" AND resource.labels.endpoint_id="{endpoint_id}" '
            f'AND timestamp>="{stamp}"')


def entry_line(entry: Any) -> str:
    """One entry as one line: time, severity and the message (a JSON payload's ``message``)."""
    payload = entry.payload
    if isinstance(payload, dict):
        payload = payload.get("message", payload)
    when = entry.timestamp.strftime("%H:%M:%S") if entry.timestamp else "--:--:--"
    return f"[{when} {entry.severity or 'DEFAULT'}] {payload}"


def logging_client(target: Target, logging_endpoint: str | None = None) -> logging_v2.Client:
    """A Cloud Logging client (HTTP, like the Vertex clients); ``logging_endpoint`` for a stand-in."""
    options = {"api_endpoint": logging_endpoint} if logging_endpoint else None
    credentials = AnonymousCredentials() if target.anonymous else None
    return logging_v2.Client(project=target.project, credentials=credentials, _use_grpc=False,
                              client_options=options)


class LogTail:
    """Each call prints the endpoint's log entries that came since the last call."""

    def __init__(self, list_entries: Callable[[str], Iterable[Any]], endpoint_name: str, since: datetime,
                 write: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> None:
        self._list = list_entries
        self._endpoint = endpoint_name
        self._after = since
        self._shown: set[str] = set()  # insert ids at the last timestamp, which the next poll asks for again
        self._write = write
        self.stopped = False

    @classmethod
    def for_endpoint(cls, client: logging_v2.Client, project: str, endpoint_name: str, since: datetime) -> LogTail:
        def list_entries(filter_: str) -> Iterable[Any]:
            return client.list_entries(resource_names=[f"projects/{project}"], filter_=filter_,
                                       order_by=logging_v2.ASCENDING, page_size=PAGE_SIZE)

        return cls(list_entries, endpoint_name, since)

    def __call__(self) -> None:
        if self.stopped:
            return
        try:
            entries = list(self._list(endpoint_filter(self._endpoint, self._after)))
        except Exception as exc:  # logs are a help: a refusal stops the tail, never the deployment
            self._write(f"(no container logs: {type(exc).__name__}: {str(exc)[:200]}; reading them needs "
                        "roles/logging.viewer; --no-logs turns the tail off)")
            self.stopped = True
            return
        for entry in entries:
            if entry.insert_id in self._shown:
                continue
            self._write(entry_line(entry))
            if entry.timestamp and entry.timestamp > self._after:
                self._after, self._shown = entry.timestamp, set()
            self._shown.add(entry.insert_id)
