"""The sampling defaults of requests that leave a field out, and default grammars and stop strings."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from app.config.options import SettingsError, option
from app.engine.types import (
    RANDOM_SEED,
    SAMPLER_LETTERS,
    SAMPLER_NAMES,
    SamplingParams,
    sampler_names,
)

_SAMPLING = SamplingParams()  # the sampling defaults' owner


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling defaults of requests that leave a field out, and default grammars and stop strings."""

    seed: int = option(("-s", "--seed"), "int", -1, "default sampling seed (-1 = random)",
        env="LLAMA_ARG_SEED", minimum=-1)
    temp: float = option(("--temp", "--temperature"), "float", 0.8, "default temperature",
        env="LLAMA_ARG_TEMPERATURE", env_aliases=("LLAMA_ARG_TEMP",), minimum=0)
    top_k: int = option(("--top-k",), "int", 40, "default top-k", env="LLAMA_ARG_TOP_K", minimum=0)
    top_p: float = option(("--top-p",), "float", 0.95, "default top-p", env="LLAMA_ARG_TOP_P", minimum=0)
    min_p: float = option(("--min-p",), "float", 0.05, "default min-p", env="LLAMA_ARG_MIN_P", minimum=0)
    repeat_penalty: float = option(("--repeat-penalty",), "float", 1.0, "default repeat penalty",
        env="LLAMA_ARG_REPEAT_PENALTY", minimum=0)
    repeat_last_n: int = option(("--repeat-last-n",), "int", 64,
        "default window of the repeat penalties (-1 = slot context)",
        env="LLAMA_ARG_REPEAT_LAST_N", minimum=-1)
    top_nsigma: float = option(("--top-nsigma", "--top-n-sigma"), "float", _SAMPLING.top_n_sigma,
        "default top-n-sigma (-1: off)")
    xtc_probability: float = option(("--xtc-probability",), "float", _SAMPLING.xtc_probability,
        "default XTC probability (0: off)", minimum=0)
    xtc_threshold: float = option(("--xtc-threshold",), "float", _SAMPLING.xtc_threshold, "default XTC threshold",
        minimum=0)
    typical_p: float = option(("--typical", "--typical-p"), "float", _SAMPLING.typical_p,
        "default locally typical sampling p (1: off)", minimum=0)
    presence_penalty: float = option(("--presence-penalty",), "float", _SAMPLING.presence_penalty,
        "default presence penalty (0: off)", env="LLAMA_ARG_PRESENCE_PENALTY")
    frequency_penalty: float = option(("--frequency-penalty",), "float", _SAMPLING.frequency_penalty,
        "default frequency penalty (0: off)", env="LLAMA_ARG_FREQUENCY_PENALTY")
    dry_multiplier: float = option(("--dry-multiplier",), "float", _SAMPLING.dry_multiplier,
        "default DRY multiplier (0: off)", minimum=0)
    dry_base: float = option(("--dry-base",), "float", _SAMPLING.dry_base, "default DRY base", minimum=0)
    dry_allowed_length: int = option(("--dry-allowed-length",), "int", _SAMPLING.dry_allowed_length,
        "default DRY allowed length", minimum=0)
    dry_penalty_last_n: int = option(("--dry-penalty-last-n",), "int", _SAMPLING.dry_penalty_last_n,
        "default DRY window (-1: slot context, 0: off)", minimum=-1)
    dry_sequence_breaker: tuple[str, ...] = option(("--dry-sequence-breaker",), "texts", (),
        "a default DRY sequence breaker, replacing the built-in ones (\\n : \" *); repeatable; 'none': no breakers",
        metavar="STRING")
    dynatemp_range: float = option(("--dynatemp-range",), "float", _SAMPLING.dynatemp_range,
        "default dynamic temperature range (0: off)", minimum=0)
    dynatemp_exponent: float = option(("--dynatemp-exp",), "float", _SAMPLING.dynatemp_exponent,
        "default dynamic temperature exponent", minimum=0)
    mirostat: str = option(("--mirostat",), "choice", str(_SAMPLING.mirostat),
        "default Mirostat (0: off, 1: Mirostat, 2: Mirostat 2.0)", choices=("0", "1", "2"))
    mirostat_eta: float = option(("--mirostat-lr",), "float", _SAMPLING.mirostat_eta,
        "default Mirostat learning rate (eta)", minimum=0)
    mirostat_tau: float = option(("--mirostat-ent",), "float", _SAMPLING.mirostat_tau,
        "default Mirostat target entropy (tau)", minimum=0)
    adaptive_target: float = option(("--adaptive-target",), "float", _SAMPLING.adaptive_target,
        "adaptive-p (add adaptive_p to --samplers): pick tokens near this probability, 0.0 to 1.0 (negative: off)",
        maximum=1.0, metavar="N")
    adaptive_decay: float = option(("--adaptive-decay",), "float", _SAMPLING.adaptive_decay,
        "adaptive-p's decay: lower adapts faster, 0.0 to 0.99", minimum=0.0, maximum=0.99, metavar="N")
    backend_sampling: bool = option(("-bs", "--backend-sampling"), "bool", _SAMPLING.backend_sampling,
        "by default, run the sampler chain in the model's graph on its device (a request's backend_sampling "
        "wins; not with a grammar, a reasoning budget or n_probs, which sample on the CPU)",
        env="LLAMA_ARG_BACKEND_SAMPLING")
    ignore_eos: bool = option(("--ignore-eos",), "bool", _SAMPLING.ignore_eos,
        "by default, generate past end-of-generation tokens (until the token limit)")
    samplers: str | None = option(("--samplers",), "str", None,
        "default sampler order, names separated by ';' (default: " + ";".join(_SAMPLING.samplers) + ")",
        metavar="SAMPLERS")
    sampler_seq: str | None = option(("--sampler-seq", "--sampling-seq"), "str", None,
        "default sampler order, one letter a sampler (" + "".join(SAMPLER_LETTERS) + "); --samplers wins",
        metavar="SEQUENCE")
    logit_bias: tuple[str, ...] = option(("-l", "--logit-bias"), "texts", (),
        "a default logit bias, TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1); repeatable; a request's own "
        "logit_bias replaces them", metavar="TOKEN_ID(+/-)BIAS")
    grammar: str | None = option(("--grammar",), "str", None,
        "a default GBNF grammar, for requests that give no grammar or JSON schema", metavar="GRAMMAR")
    grammar_file: str | None = option(("--grammar-file",), "str", None, "a file holding the default grammar",
        metavar="FNAME")
    json_schema: str | None = option(("-j", "--json-schema"), "str", None,
        "a default JSON schema (its grammar), for requests that give no grammar or JSON schema", metavar="SCHEMA")
    json_schema_file: str | None = option(("-jf", "--json-schema-file"), "str", None,
        "a file holding the default JSON schema", metavar="FILE")
    reverse_prompt: tuple[str, ...] = option(("-r", "--reverse-prompt"), "texts", (),
        "a default stop string, for requests that give none; repeatable", metavar="PROMPT")

    @property
    def sampling_defaults(self) -> SamplingParams:
        """The sampling a request gets for every field it does not set: SamplingParams' defaults,
        with the server's own (--temp, --top-k, ...) in their place."""
        return replace(SamplingParams(), temperature=self.temp, top_k=self.top_k, top_p=self.top_p,
                       min_p=self.min_p, repeat_penalty=self.repeat_penalty, repeat_last_n=self.repeat_last_n,
                       seed=RANDOM_SEED if self.seed < 0 else self.seed, top_n_sigma=self.top_nsigma,
                       xtc_probability=self.xtc_probability, xtc_threshold=self.xtc_threshold,
                       typical_p=self.typical_p, presence_penalty=self.presence_penalty,
                       frequency_penalty=self.frequency_penalty, dry_multiplier=self.dry_multiplier,
                       dry_base=self.dry_base, dry_allowed_length=self.dry_allowed_length,
                       dry_penalty_last_n=self.dry_penalty_last_n, dynatemp_range=self.dynatemp_range,
                       dynatemp_exponent=self.dynatemp_exponent, mirostat=int(self.mirostat),
                       mirostat_eta=self.mirostat_eta, mirostat_tau=self.mirostat_tau, ignore_eos=self.ignore_eos,
                       adaptive_target=self.adaptive_target, adaptive_decay=self.adaptive_decay,
                       backend_sampling=self.backend_sampling,
                       samplers=self.sampler_order or _SAMPLING.samplers, logit_bias=self.default_logit_bias,
                       dry_sequence_breakers=self.dry_breakers)

    @property
    def dry_breakers(self) -> tuple[str, ...]:
        """--dry-sequence-breaker as llama-server takes it: the first replaces the built-in breakers,
        ``none`` clears those given before it."""
        if not self.dry_sequence_breaker:
            return _SAMPLING.dry_sequence_breakers
        breakers: list[str] = []
        for value in self.dry_sequence_breaker:
            breakers = [] if value == "none" else [*breakers, value]
        return tuple(breakers)

    @property
    def default_logit_bias(self) -> tuple[tuple[int, float], ...]:
        """``--logit-bias`` as (token, bias) pairs; a SettingsError names a bad one."""
        pairs = []
        for item in self.logit_bias:
            match = re.fullmatch(r"\s*(-?\d+)\s*([+-])\s*(\S+)\s*", item)
            try:
                if match is None:
                    raise ValueError(item)
                bias = float(match[3])
            except ValueError:
                raise SettingsError(f"--logit-bias/-l: {item!r} is not TOKEN_ID+BIAS or TOKEN_ID-BIAS") from None
            pairs.append((int(match[1]), -bias if match[2] == "-" else bias))
        return tuple(pairs)

    def default_grammar_source(self) -> tuple[Literal["grammar", "schema"], Any] | None:
        """The default constraint of requests that give none: (``grammar``, GBNF) from --grammar or
        --grammar-file, (``schema``, a JSON schema) from --json-schema or --json-schema-file, None
        without them. Reads the file; a SettingsError names a file or schema that cannot be used."""
        given = [(name, value) for name, value in (("--grammar", self.grammar), ("--grammar-file", self.grammar_file),
                                                   ("--json-schema", self.json_schema),
                                                   ("--json-schema-file", self.json_schema_file)) if value is not None]
        if not given:
            return None
        if len(given) > 1:
            raise SettingsError(f"{' and '.join(name for name, _ in given)}: give one default grammar or schema")
        name, value = given[0]
        if name.endswith("-file"):
            try:
                with open(value, encoding="utf-8") as handle:
                    value = handle.read()
            except OSError as exc:
                raise SettingsError(f"{name}: cannot read {value!r}: {exc.strerror}") from None
        if name.startswith("--grammar"):
            return "grammar", value
        try:
            schema = json.loads(value)
        except ValueError as exc:
            raise SettingsError(f"{name}: not JSON: {exc}") from None
        if not isinstance(schema, dict | bool):
            raise SettingsError(f"{name}: a JSON schema must be an object")
        return "schema", schema

    @property
    def sampler_order(self) -> tuple[str, ...] | None:
        """--samplers (names) or --sampler-seq (letters); None when neither is given or one is unknown."""
        if self.samplers is not None:
            return sampler_names([name.strip() for name in self.samplers.split(";") if name.strip()])
        return sampler_names(self.sampler_seq) if self.sampler_seq is not None else None

    def check(self) -> None:
        """The sampler order, the default logit bias and the default grammar or schema are usable."""
        if (self.samplers is not None or self.sampler_seq is not None) and self.sampler_order is None:
            known = ", ".join(sorted(SAMPLER_NAMES))
            raise SettingsError(f"--samplers/--sampler-seq: unknown sampler (known: {known}; "
                                f"letters {''.join(SAMPLER_LETTERS)})")
        _ = self.default_logit_bias  # names a bad item
        self.default_grammar_source()
