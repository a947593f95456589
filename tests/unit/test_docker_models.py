"""--docker-repo's form (llama-server's defaults: repository ai/, tag latest) and the choice of the
manifest's GGUF layer."""

from __future__ import annotations

import pytest

from app.config.options import SettingsError
from app.config.settings import parse_settings
from app.model_sources.docker import DockerModelError, DockerRef, gguf_digest

HEX = "ab" * 32


@pytest.mark.parametrize(("spec", "repo", "tag", "file_name"), [
    ("gemma3", "ai/gemma3", "latest", "ai_gemma3_latest.gguf"),
    ("smollm2:135M-Q4_0", "ai/smollm2", "135M-Q4_0", "ai_smollm2_135M-Q4_0.gguf"),
    ("me/model:v1", "me/model", "v1", "me_model_v1.gguf"),
    ("me/model", "me/model", "latest", "me_model_latest.gguf"),
])
def test_the_form_and_its_defaults(spec: str, repo: str, tag: str, file_name: str) -> None:
    ref = DockerRef.parse(spec)
    assert (ref.repo, ref.tag, ref.file_name) == (repo, tag, file_name)


@pytest.mark.parametrize("spec", ["", ":tag", "model:"])
def test_a_bad_form_is_refused_at_start_up(spec: str) -> None:
    with pytest.raises(DockerModelError, match=r"\[REPO/\]MODEL\[:TAG\]"):
        DockerRef.parse(spec)
    with pytest.raises(SettingsError, match="--docker-repo"):
        parse_settings(["--docker-repo", spec], {}, error=lambda message: None)


def test_one_model_source_at_a_time() -> None:
    with pytest.raises(SettingsError, match="--model and --docker-repo: give one"):
        parse_settings(["-m", "x.gguf", "-dr", "gemma3"], {}, error=lambda message: None)
    settings = parse_settings([], {"LLAMA_ARG_DOCKER_REPO": "gemma3", "LLAMA_ARG_DOCKER_REGISTRY": "http://r.test"})
    assert (settings.docker_repo, settings.docker_registry) == ("gemma3", "http://r.test")


def test_the_gguf_layer_is_chosen_and_its_digest_checked() -> None:
    ref = DockerRef.parse("gemma3")
    layers = [{"mediaType": "application/vnd.docker.ai.license", "digest": "sha256:" + "0" * 64},
              {"mediaType": "application/vnd.docker.ai.gguf.v3", "digest": "sha256:" + HEX.upper()}]
    assert gguf_digest({"layers": layers}, ref) == "sha256:" + HEX
    assert gguf_digest({"layers": [{"mediaType": "application/x-gguf", "digest": "sha256:" + HEX}]}, ref)
    with pytest.raises(DockerModelError, match="no GGUF layer"):
        gguf_digest({"layers": layers[:1]}, ref)
    with pytest.raises(DockerModelError, match="not a SHA-256"):
        gguf_digest({"layers": [{"mediaType": "application/vnd.docker.ai.gguf.v3", "digest": "md5:00"}]}, ref)
