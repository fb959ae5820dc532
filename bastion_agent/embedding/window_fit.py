"""Which windows fit the model's context, counted before embedding; what was cut, after.

A window is ``size_tokens`` regex tokens; the model counts its own tokens,
usually more (technical text, other scripts, numbers). A window over the
model's context is still embedded (windows stay as docs/contract.md defines
them) but the server cuts it, so its vector stands for its first part only.
``measure`` counts, before embedding, the model tokens of each window to
embed, exactly as sent (the passage prefix and the sanitized window text):
by the server's tokenizer where it has one (``server_info.count_tokens``),
else estimated as regex tokens times a ratio, which is said to be an
estimate. ``truncated_after`` then says which of those windows got a vector
of a cut text, with the tokens lost, for the summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from bastion_agent.chunking.chunker import TOKEN_RE  # the chunker's token (docs/contract.md)
from bastion_agent.embedding import server_info
from bastion_agent.embedding.client import PROBE_TEXT
from bastion_agent.embedding.wire_formats import WireFormat, wire_format

# Model tokens per regex token when nothing better is known: the 95th
# percentile measured with multilingual-e5-small's tokenizer on 256-token
# windows of /usr/share/doc (1.58; /usr/share/common-licenses 1.39, means
# 1.23 and 1.18: bench/embed/token_ratio.py, docs/embedding.md).
DEFAULT_RATIO = 1.6
MAX_COUNTED = 20000  # windows counted by the server in one run; the rest is estimated from those counts
FIT_MARGIN = 0.95  # the suggested size_tokens leaves 5 % of the context free


@dataclass
class WindowFit:
    """The windows to embed against the model's context."""

    context: int | None = None
    method: str | None = None  # "server", "server+estimate", "estimate", or None (context unknown)
    counted: int = 0
    over: dict[str, int] = field(default_factory=dict)  # chunk_id -> model tokens, windows over the context
    max_tokens: int = 0
    size_fit: int | None = None  # a size_tokens every window measured would fit in

    @property
    def estimated(self) -> bool:
        return self.method is not None and "estimate" in self.method


def regex_tokens(text: str) -> int:
    return len(TOKEN_RE.findall(text))


def measure(info: "server_info.ServerInfo", items: Sequence[tuple[str, str]], size_tokens: int,
            probe_tokens: int | None, count: Callable[[list[str]], list[int | None]] | None) -> WindowFit:
    """Model tokens of each ``(chunk_id, text as sent)`` against ``info.context``.

    ``count`` is the server's counter (None when it has none); ``probe_tokens``
    the server's token count of the probe text, when its answer gave one.
    """
    fit = WindowFit(context=info.context)
    if info.context is None or not items:
        return fit
    texts = [text for _, text in items]
    counts: list[int | None] = list(count(texts[:MAX_COUNTED])) if count is not None else []
    counts += [None] * (len(texts) - len(counts))
    regex = [regex_tokens(text) for text in texts]
    measured = [(c, r) for c, r in zip(counts, regex) if c is not None and r >= 8]
    if measured:
        ratio = _percentile([c / r for c, r in measured], 0.95)
    elif probe_tokens:
        ratio = max(1.0, probe_tokens / max(1, regex_tokens(PROBE_TEXT)))
    else:
        ratio = DEFAULT_RATIO
    known = sum(1 for c in counts if c is not None)
    fit.counted = known
    fit.method = "server" if known == len(texts) else ("server+estimate" if known else "estimate")
    tokens = [c if c is not None else math.ceil(r * ratio) for c, r in zip(counts, regex)]
    fit.max_tokens = max(tokens)
    fit.over = {chunk_id: t for (chunk_id, _), t in zip(items, tokens) if t > info.context}
    if fit.over:
        fit.size_fit = _size_that_fits(tokens, regex, size_tokens, info.context)
    return fit


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _size_that_fits(tokens: list[int], regex: list[int], size_tokens: int, context: int) -> int:
    """The largest size_tokens at which every window measured would fit: context over the worst ratio."""
    floor = min(size_tokens // 2, 16)
    ratios = [t / r for t, r in zip(tokens, regex) if r >= max(1, floor)] or [t / max(1, r) for t, r in zip(tokens, regex)]
    size = int(context * FIT_MARGIN / max(ratios))
    return max(1, min(size, size_tokens - 1))


def fix_line(fit: WindowFit, to_embed: int, cuts: bool, size_tokens: int, overlap_tokens: int,
             fmt: WireFormat | str | None = None) -> str | None:
    """One line for the windows over the context, with the fix; None when every window fits."""
    fmt = wire_format(fmt) if fmt else None
    if not fit.over:
        return None
    how = ("estimated: the server cannot count tokens" if fit.method == "estimate"
           else "partly estimated" if fit.estimated else "counted by the server")
    lost = sum(t - fit.context for t in fit.over.values())
    if not cuts:
        fate = "the server embeds them as a mean of context-long pieces"
    elif fmt is not None and fmt.refuses_long and fmt.can_truncate:
        fate = f"{fmt.label} refuses them and they are resent asking it to truncate (counted as truncated)"
    else:
        fate = "the server keeps only their first tokens or refuses them (counted as truncated or failed)"
    overlap = " (and overlap_tokens below it)" if overlap_tokens >= (fit.size_fit or 1) else ""
    return (f"{len(fit.over)} of {to_embed} windows to embed are over the model's {fit.context}-token context "
            f"(up to {fit.max_tokens} tokens, {lost} beyond it; {how}); {fate}; for vectors of whole windows set "
            f"[embed.chunk] size_tokens = {fit.size_fit}{overlap} or less (now {size_tokens}), then run chunk "
            "and embed again")


def truncated_after(fit: WindowFit, cuts: bool, fmt: WireFormat | str | None, db, vector_key: str,
                    engine_truncated: set[str]) -> tuple[int, int]:
    """``(truncated, tokens_lost)`` of this run.

    Truncated: the windows whose stored vector is of a cut text. That is the
    windows over the context that got a vector from a server that cuts (a
    refused one is a failed chunk, not a truncated one), together with the
    windows the engine resent asking the server to truncate them (a format
    that ``refuses_long``, as Ollama's with ``truncate: false``). Tokens lost: what
    those windows had beyond the context, as counted (0 for a window only
    the server found too long).
    """
    cut = set(engine_truncated)
    refused = fmt is not None and wire_format(fmt).refuses_long  # the engine's resends are in engine_truncated
    if cuts and not refused:
        lookup = "SELECT 1 FROM vectors WHERE chunk_id = ? AND model = ?"
        cut.update(chunk_id for chunk_id in fit.over if db.execute(lookup, (chunk_id, vector_key)).fetchone())
    lost = sum(fit.over[chunk_id] - fit.context for chunk_id in cut if chunk_id in fit.over)
    return len(cut), lost


# --- the context when the server does not say it -----------------------------------

SAME_VECTOR = 1e-6  # 1 - cosine below which two answers are the same vector (one text, batch 1: deterministic)
PROBE_DROP = 8  # regex tokens the first shorter prefix drops: a trailing mark alone may not move a vector
PROBE_MIN_TOKENS = 48  # a longest window shorter than this is not probed: no embedding model reads less


def probe_context(client, text: str, count, probe_tokens: int | None) -> tuple[int | None, int]:
    """``(context, requests)``: where the server stops reading, found by embedding prefixes of ``text``.

    llama-cpp-python's server names no context and silently keeps a long
    input's first tokens, so a sweep of windows over its 512 tokens said
    ``truncated 0``. A server that cuts gives every prefix longer
    than its cut the same vector as the whole text; a server that reads
    everything gives a shorter prefix another vector. So: embed the longest
    window to embed, then its prefix ``PROBE_DROP`` regex tokens shorter; equal means it
    was cut, and a bisection over the prefix length (about log2 of the
    window's tokens, 8 requests for 300) finds the shortest prefix with the
    whole text's vector. The context is one more than the model tokens of
    the prefix one token shorter (the server's counter, else the same
    estimate ``measure`` uses), so a window is counted as cut exactly when
    it is longer than what the server was seen to read. Any failure is no
    answer (None): the stage goes on as before, the context unknown.
    """
    from bastion_agent.core.errors import ModelServerError

    ends = [match.end() for match in TOKEN_RE.finditer(text)]
    requests = 0

    def vector(n: int):
        nonlocal requests
        requests += 1
        return client.embed([text[: ends[n - 1]]])[0]

    try:
        if len(ends) < 2:
            return None, requests
        whole = vector(len(ends))
        shorter = len(ends) - min(PROBE_DROP, len(ends) - 1)
        if not _same(vector(shorter), whole):
            return None, requests  # the whole window was read: its end changes the vector
        low, high = 1, shorter  # vector(high) is the whole text's; find the smallest such prefix
        while low < high:
            middle = (low + high) // 2
            if _same(vector(middle), whole):
                high = middle
            else:
                low = middle + 1
    except ModelServerError:
        return None, requests
    read = text[: ends[high - 2]] if high >= 2 else ""
    tokens = count([read])[0] if count is not None and read else None
    if tokens is None:
        ratio = max(1.0, probe_tokens / max(1, regex_tokens(PROBE_TEXT))) if probe_tokens else DEFAULT_RATIO
        tokens = math.ceil(regex_tokens(read) * ratio)
    return tokens + 1, requests


def _same(a, b) -> bool:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    return norm > 0 and 1 - dot / norm < SAME_VECTOR


# --- the embed stage's calls ----------------------------------------------------


def say(line: str, stream=None) -> None:
    """One line on stderr in the stage's voice."""
    import sys

    print(f"bastion_agent embed: {line}", file=stream if stream is not None else sys.stderr, flush=True)


def check_server(client, model: str, fmt: WireFormat | str) -> "server_info.ServerInfo":
    """After the probe, before the store is opened: what the server serves, refused if not the model."""
    info = server_info.inspect(client.config, fmt, model)
    for warning in (client.config.cleartext_warning, server_info.check_identity(info, model, client.config.display_url)):
        if warning:
            say(warning)
    return info


def fit_windows(info, client, embed_settings, missing: Sequence[tuple[str, str]]) -> WindowFit:
    """Count the windows to embed against the context, and say so in one line when some do not fit."""
    prefix = embed_settings.passage_prefix
    items = [(chunk_id, prefix + text) for chunk_id, text in missing]
    count = None
    if info.counter:
        def count(texts):
            return server_info.count_tokens(client.config, info.counter, client.model, texts)
    longest = max((text for _, text in items), key=regex_tokens) if items else ""
    may_cut_silently = info.wire_format is not None and not info.wire_format.refuses_long
    if (info.context is None and info.cuts_long_inputs and may_cut_silently
            and regex_tokens(longest) >= PROBE_MIN_TOKENS):
        info.context, probes = probe_context(client, longest, count, client.probe_tokens)
        if info.context is not None:
            info.context_source = f"probed ({probes} requests)"
    if info.context is None:
        count = None
    fit = measure(info, items, embed_settings.size_tokens, client.probe_tokens, count)
    line = fix_line(fit, len(items), info.cuts_long_inputs, embed_settings.size_tokens,
                    embed_settings.overlap_tokens, info.wire_format)
    if line:
        say(line)
    return fit


def summary_fields(info, fit: WindowFit | None, db, vector_key: str, engine_truncated: set[str],
                   model: str) -> dict:
    """The summary's ``served_model``, ``context_tokens``, ``truncated``, ``tokens_lost`` and their companions."""
    if info is None:  # not probed: nothing was asked, nothing embedded
        return {"served_model": None, "context_tokens": None, "truncated": len(engine_truncated), "tokens_lost": 0}
    fit = fit or WindowFit(context=info.context)
    truncated, lost = truncated_after(fit, info.cuts_long_inputs, info.wire_format, db, vector_key, engine_truncated)
    return {
        "served_model": server_info.served_match(model, info.served),
        "served_models": info.served[:16],
        "context_tokens": info.context,
        "context_source": info.context_source,
        "token_counts": fit.method,
        "token_counter": info.counter,
        "over_context": len(fit.over),
        "truncated": truncated,
        "tokens_lost": lost,
        "max_window_tokens": fit.max_tokens or None,
        "size_tokens_fit": fit.size_fit,
    }
