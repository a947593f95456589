"""Every flag of llama-server's table (app/config/upstream_flags.json, from the pinned llama.cpp's
common/arg.cpp) parses here: implemented, accepted with a start-up warning that says why it has
no effect, or refused with the reason. The counts of the three groups are printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config.presets import PRESETS, expand_presets
from app.config.settings import HELP_FLAGS, OPTIONS, UNIMPLEMENTED, SettingsError, parse_settings
from app.config.upstream_flags import UpstreamFlag, treatment, upstream_flags

DECLARED = {*HELP_FLAGS, *PRESETS, *(flag for option in OPTIONS for flag in (*option.flags, *option.negative_flags))}
SAMPLE_VALUES = {"int": "1", "string": "1", "bool": "", "void": ""}


def argv_for(flag: UpstreamFlag, name: str) -> list[str]:
    if name in flag.negative or flag.values == 0:
        return [name]
    return [name, *["1"] * flag.values]


def group(flag: UpstreamFlag) -> str:
    if flag not in UNIMPLEMENTED:
        return "implemented"
    how = treatment(flag)
    assert how is not None, f"{flag.name}: no treatment"
    return "accepted with a warning" if how.action == "warn" else "refused"


def test_the_table_is_llama_servers() -> None:
    table = upstream_flags()
    assert len(table) == 255
    names = {name for flag in table for name in flag.flags}
    assert {"--model", "--ctx-size", "--parallel", "--cache-type-k", "--mmproj", "--cache-ram"} <= names


def test_every_flag_has_a_treatment_and_the_groups_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    counts: dict[str, int] = {}
    for flag in upstream_flags():
        counts[group(flag)] = counts.get(group(flag), 0) + 1
    with capsys.disabled():
        print("\nllama-server's flags here: " + ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))
    assert sum(counts.values()) == 255 and set(counts) == {"implemented", "accepted with a warning", "refused"}


@pytest.mark.parametrize("flag", upstream_flags(), ids=lambda flag: flag.name)
def test_every_name_of_every_flag_parses_or_is_refused_with_a_reason(flag: UpstreamFlag) -> None:
    kind = group(flag)
    for name in (*flag.flags, *flag.negative):
        if name in HELP_FLAGS:
            continue  # argparse's help: prints and exits
        argv = argv_for(flag, name)
        if kind == "refused":
            with pytest.raises(SettingsError) as refused:
                parse_settings(argv, {}, error=lambda message: None)
            assert flag.name in str(refused.value) and len(str(refused.value)) > len(flag.name) + 20
            continue
        if kind == "implemented":  # its values are tested with the option itself (tests/unit/test_settings.py)
            assert name in DECLARED, f"{name}: llama-server's alias of an implemented flag is missing here"
            continue
        settings = parse_settings(argv, {}, error=lambda message: None)
        if kind == "accepted with a warning":
            assert len(settings.notes) == 1 and flag.name in settings.notes[0] and "no effect here" in settings.notes[0]


def test_an_unimplemented_flag_in_the_environment_is_treated_the_same() -> None:
    settings = parse_settings([], {"LLAMA_ARG_DEFRAG_THOLD": "0.1"})
    assert settings.notes == ("environment LLAMA_ARG_DEFRAG_THOLD: accepted, no effect here: deprecated in "
                              "llama.cpp; it has no effect there either",)
    with pytest.raises(SettingsError, match="environment LLAMA_ARG_DRAFT_MAX: removed from llama-server: use "
                                            "--spec-draft-n-max"):
        parse_settings([], {"LLAMA_ARG_DRAFT_MAX": "8"}, error=lambda message: None)


def test_the_table_is_what_the_generator_writes() -> None:
    """scripts/upstream_flags.py wrote the checked-in table; its parser reads a block the same way."""
    from scripts.upstream_flags import read_table

    sample = '''
    add_opt(common_arg(
        {"-x", "--example"}, "N",
        string_format("an example (default: %d)", params.n),
        [](common_params & params, int value) { params.n = value; }
    ).set_env("LLAMA_ARG_EXAMPLE").set_examples({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"--other"}, {"--no-other"}, "a switch",
        [](common_params & params, bool value) { params.b = value; }
    ).set_examples({LLAMA_EXAMPLE_CLI}));
    '''
    assert read_table(sample) == [{"flags": ["-x", "--example"], "negative": [], "values": 1, "kind": "int",
                                   "env": "LLAMA_ARG_EXAMPLE", "sampling": False, "speculative": False,
                                   "removed": None}]
    checked_in = json.loads((Path(__file__).parents[2] / "app" / "config" / "upstream_flags.json").read_text())
    assert len(checked_in) == len(upstream_flags())


def test_the_configuration_guide_names_every_option() -> None:
    """The guide's hand-written table (docs/configuration.md) explains every option, beside the generated
    reference (tests/unit/test_docs.py checks that one)."""
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    section = page[:page.index("<!-- upstream-flags:start")] + page[page.index("<!-- upstream-flags:end"):]
    missing = [option.flags[-1] for option in OPTIONS if not any(f"`{flag}" in section for flag in option.flags)]
    assert not missing, f"options docs/configuration.md does not name: {missing}"


def test_a_preset_expands_in_place_as_llama_server_applies_it() -> None:
    before = parse_settings(["--port", "9000", "--fim-qwen-7b-default"], {})
    assert (before.port, before.hf_repo, before.hf_file) == (8012, "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF",
                                                             "qwen2.5-coder-7b-q8_0.gguf")
    assert before.cache_reuse == 256 and (before.batch_size, before.ubatch_size) == (1024, 1024)
    after = parse_settings(["--embd-gemma-default", "-np", "4", "--port", "9000"], {})
    assert (after.port, after.n_parallel, after.embeddings, after.ctx_size) == (9000, 4, True, 65536)
    assert expand_presets(["--jinja"]) == ["--jinja"]
    assert all(parse_settings([flag], {}).hf_repo for flag in PRESETS if flag != "--spec-default")  # a Hub model each
    assert parse_settings(["--spec-default"], {}).speculation.types == ("ngram-mod",)
