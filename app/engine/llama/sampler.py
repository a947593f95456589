"""Sampler chains: one per sequence, in llama-server's order, with the log-probabilities a request
asks for (before or after the chain)."""

from __future__ import annotations

import ctypes
from typing import Any

from app.engine.errors import InvalidJobError
from app.engine.llama.bindings import lc
from app.engine.llama.vocab import LlamaVocabulary
from app.engine.types import Sampled, SamplingParams


class LlamaSampler:
    """A llama.cpp sampler chain bound to one context (one per sequence: chains keep state)."""

    def __init__(self, chain: Any, ctx: Any, n_vocab: int, n_probs: int, post_sampling: bool) -> None:
        self._chain = chain
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._n_probs = n_probs
        self._post_sampling = post_sampling
        self._seq: int | None = None  # the sequence whose graph runs the chain (backend sampling)
        self.draft_room: int | None = None  # the longest draft a step may verify (None: no bound of its own)

    def offload(self, seq: int, draft_room: int) -> bool:
        """Run the chain in the model's graph for ``seq`` (llama.cpp's backend sampling: the stages it can
        run there, from the first, run on the model's device, the rest on the CPU over what they leave;
        ``llama_sampler_sample`` then reads the token it picked). A step may then verify at most
        ``draft_room`` draft tokens for the sequence (the context's outputs a sequence, set at load). False
        where llama.cpp cannot (it logs why), and the chain samples on the CPU as without it."""
        if lc.llama_set_sampler(self._ctx, seq, self._chain):
            self._seq = seq
            self.draft_room = draft_room  # llama.cpp refuses a decode with more outputs for the sequence
        return self._seq is not None

    def sample(self, batch_index: int) -> Sampled:
        if self._n_probs <= 0:
            return Sampled(int(lc.llama_sampler_sample(self._chain, self._ctx, batch_index)))
        from app.engine.llama import logits  # numpy: imported by the worker once ready

        row = logits.logits_row(self._ctx, batch_index, self._n_vocab)
        if not self._post_sampling:
            token = int(lc.llama_sampler_sample(self._chain, self._ctx, batch_index))
            return Sampled(token, logits.top_logprobs(row, token, self._n_probs))
        return logits.sample_post_chain(self._chain, row, self._n_probs)

    def accept(self, token: int) -> None:
        lc.llama_sampler_accept(self._chain, token)

    def free(self) -> None:
        if self._seq is not None:  # detached first: the context must not keep a freed chain
            lc.llama_set_sampler(self._ctx, self._seq, None)
            self._seq = None
        if self._chain is not None:
            lc.llama_sampler_free(self._chain)
            self._chain = None


def _add(chain: Any, sampler: Any) -> None:
    lc.llama_sampler_chain_add(chain, sampler)


def new_sampler(params: SamplingParams, ctx: Any, vocab: LlamaVocabulary, n_ctx_seq: int,
                perf: bool) -> LlamaSampler:
    """A sampler chain in llama-server's order for one sequence of ``ctx`` (``perf``: with its timings)."""
    chain_params = lc.llama_sampler_chain_default_params()
    chain_params.no_perf = not perf
    chain = lc.llama_sampler_chain_init(chain_params)
    n_vocab = vocab.n_vocab
    if params.logit_bias:
        entries = [(tok, bias) for tok, bias in params.logit_bias if 0 <= tok < n_vocab]
        array = (lc.llama_logit_bias * max(1, len(entries)))()
        for index, (token, bias) in enumerate(entries):
            array[index].token = token  # type: ignore[assignment]
            array[index].bias = bias
        _add(chain, lc.llama_sampler_init_logit_bias(n_vocab, len(entries), array))
    if params.grammar:
        grammar = lc.llama_sampler_init_grammar(vocab.handle, params.grammar.encode(), b"root")
        if not grammar:
            lc.llama_sampler_free(chain)
            raise InvalidJobError("Failed to initialize samplers: llama.cpp could not parse the grammar (check the "
                                  "rule syntax and that 'root' is defined)")
        _add(chain, grammar)
    min_keep = max(1, params.min_keep)
    greedy = params.temperature <= 0.0
    if params.mirostat and not greedy:
        _add(chain, lc.llama_sampler_init_temp(params.temperature))
        if params.mirostat == 1:
            _add(chain, lc.llama_sampler_init_mirostat(n_vocab, params.seed, params.mirostat_tau,
                                                       params.mirostat_eta, 100))
        else:
            _add(chain, lc.llama_sampler_init_mirostat_v2(params.seed, params.mirostat_tau, params.mirostat_eta))
        return LlamaSampler(chain, ctx, n_vocab, params.n_probs, params.post_sampling_probs)
    for name in params.samplers:
        sampler = None if name == "adaptive_p" else _stage(name, params, vocab, n_ctx_seq, min_keep, greedy)
        if sampler is not None:
            _add(chain, sampler)
    if greedy:
        _add(chain, lc.llama_sampler_init_greedy())
    elif "adaptive_p" in params.samplers:  # it picks the token itself, so it ends the chain in dist's place
        _add(chain, lc.llama_sampler_init_adaptive_p(params.adaptive_target, params.adaptive_decay, params.seed))
    else:
        _add(chain, lc.llama_sampler_init_dist(params.seed))
    return LlamaSampler(chain, ctx, n_vocab, params.n_probs, params.post_sampling_probs)

def _stage(name: str, params: SamplingParams, vocab: LlamaVocabulary, n_ctx_seq: int, min_keep: int,
           greedy: bool) -> Any:
    """One stage of the chain by llama-server's name; None where it would do nothing. Greedy
    picking keeps only the stages that change which token is best (penalties, DRY)."""
    if name == "penalties":
        last_n = n_ctx_seq if params.repeat_last_n == -1 else min(params.repeat_last_n, n_ctx_seq)
        if last_n == 0 or (params.repeat_penalty == 1.0 and params.frequency_penalty == 0.0
                           and params.presence_penalty == 0.0):
            return None
        return lc.llama_sampler_init_penalties(vocab.n_vocab, last_n, params.repeat_penalty,
                                               params.frequency_penalty, params.presence_penalty)
    if name == "dry":
        if params.dry_multiplier <= 0.0:
            return None
        last_n = n_ctx_seq if params.dry_penalty_last_n == -1 else min(params.dry_penalty_last_n,
                                                                             n_ctx_seq)
        breakers = [b.encode() for b in params.dry_sequence_breakers]
        array = (ctypes.c_char_p * max(1, len(breakers)))(*breakers)
        return lc.llama_sampler_init_dry(vocab.handle, params.dry_multiplier, params.dry_base,
                                         params.dry_allowed_length, last_n, array, len(breakers))
    if greedy:
        return None
    if name == "top_n_sigma":
        return lc.llama_sampler_init_top_n_sigma(params.top_n_sigma) if params.top_n_sigma > 0 else None
    if name == "top_k":
        return lc.llama_sampler_init_top_k(params.top_k) if params.top_k > 0 else None
    if name == "typ_p":
        return lc.llama_sampler_init_typical(params.typical_p, min_keep) if params.typical_p < 1.0 else None
    if name == "top_p":
        return lc.llama_sampler_init_top_p(params.top_p, min_keep) if params.top_p < 1.0 else None
    if name == "min_p":
        return lc.llama_sampler_init_min_p(params.min_p, min_keep) if params.min_p > 0.0 else None
    if name == "xtc":
        if params.xtc_probability <= 0.0:
            return None
        return lc.llama_sampler_init_xtc(params.xtc_probability, params.xtc_threshold, min_keep, params.seed)
    if name == "temperature":
        return lc.llama_sampler_init_temp_ext(params.temperature, params.dynatemp_range,
                                              params.dynatemp_exponent)
    raise InvalidJobError(f"unknown sampler {name!r}")

