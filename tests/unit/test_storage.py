"""Cloud Storage model resolution on a fake client: URI parsing and errors that name the URI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from app.model_sources.gcs import GcsUri, ModelDownloadError, fetch_model, is_gcs_uri


class DeniedBucket:
    def get_blob(self, name: str) -> Any:
        raise gexc.Forbidden("caller does not have storage.objects.get access")  # type: ignore[no-untyped-call]


class Credentials:
    service_account_email = "serving@project.iam.gserviceaccount.com"


class DeniedClient:
    _credentials = Credentials()

    def bucket(self, name: str) -> Any:
        return DeniedBucket()


class BrokenBucket:
    def get_blob(self, name: str) -> Any:
        raise ConnectionError("network unreachable")


class BrokenClient:
    def bucket(self, name: str) -> Any:
        return BrokenBucket()


def test_parse() -> None:
    assert GcsUri.parse("gs://bucket/a/b.gguf") == GcsUri("bucket", "a/b.gguf")
    assert GcsUri.parse("gs://bucket") == GcsUri("bucket", "")
    assert is_gcs_uri("gs://x") and not is_gcs_uri("/models/x.gguf") and not is_gcs_uri(None)
    with pytest.raises(ModelDownloadError, match="no bucket"):
        GcsUri.parse("gs:///x.gguf")


def test_permission_denied_names_the_uri(tmp_path: Path) -> None:
    with pytest.raises(ModelDownloadError) as caught:
        fetch_model("gs://private/model.gguf", tmp_path, client=DeniedClient())
    message = str(caught.value)
    assert message.startswith("gs://private/model.gguf: permission denied")
    assert "serving@project.iam.gserviceaccount.com" in message and "roles/storage.objectViewer" in message


def test_other_failures_name_the_uri(tmp_path: Path) -> None:
    with pytest.raises(ModelDownloadError, match=r"^gs://b/m.gguf: ConnectionError: network unreachable"):
        fetch_model("gs://b/m.gguf", tmp_path, client=BrokenClient())
