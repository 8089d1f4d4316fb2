"""The static hint-leak check: does a hint, read at the start of an episode, state the answer?

A cheap first filter on the host, with few false alarms (regret's hint-only arm is the behavioural
test). The answer is looked for as a whole token of the NFKC-normalised hint (format characters
dropped), with its digits, letters or number words written apart or in short chunks, reversed, as
several words in order, and by its rank in a list of the possible answers shared by most seeds.
Linear in the length of the hints and observations.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import groupby
from operator import itemgetter

__all__ = ["COMMON_IN_HINTS", "SHORT_ANSWER", "hint_states_answer", "secrets", "stated_in"]

#: An answer found in the hints of at least this share of the other seeds is boilerplate, not stated
#: (unless its rank in the list of answers gives it away).
COMMON_IN_HINTS = 0.5
#: An answer this short ("8", "no") turns up in a hint by chance (see :func:`hint_states_answer`).
SHORT_ANSWER = 2
#: Answers shorter than this are not looked for reversed or joined (too many chance matches).
JOINED_MIN = 3
#: Share of the seeds whose answer must hold the same rank in a list of answers for the rank to give it away.
RANK_SHARE = 0.8

#: Characters that may not touch a stated answer in the hint (a "7" inside "17" is not a "7").
_WORD = re.compile(r"[0-9a-z]")
_TOKEN = re.compile(r"[0-9a-z]+")
_NUMBER_WORDS = {w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())} | {
    "oh": "0",
    "nought": "0",
}


def normalised(text: str) -> str:
    """NFKC form without format characters (category Cf), lower case, whitespace collapsed,
    surrounding quotes, brackets and sentence punctuation dropped."""
    text = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return " ".join(text.lower().split()).strip(" .,;:!?'\"`()[]")


def contains(hint: str, answer: str) -> bool:
    """Whether the normalised ``answer`` occurs in the normalised ``hint`` as a whole token."""
    before = "(?<![0-9a-z])" if _WORD.fullmatch(answer[0]) else ""
    after = "(?![0-9a-z])" if _WORD.fullmatch(answer[-1]) else ""
    return re.search(before + re.escape(answer) + after, hint) is not None


def secrets(action: str, observation: str) -> list[str]:
    """What a hint must not state: the action and a tool call's arguments ``observation`` lacks."""
    out = [normalised(action)]
    try:
        call = json.loads(action)
    except ValueError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("arguments"), dict):
        shown = normalised(observation)
        for value in call["arguments"].values():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                argument = normalised(str(value))
                if argument and not contains(shown, argument):
                    out.append(argument)
    return [secret for secret in dict.fromkeys(out) if secret]


def _joined(tokens: list[str], joins: list[bool]) -> str:
    """``tokens`` with each run of neighbours that may join (``joins[i]``: token ``i`` may) written as one."""
    out: list[str] = []
    for joined, run in groupby(zip(tokens, joins, strict=True), key=itemgetter(1)):
        words = [token for token, _ in run]
        out += ["".join(words)] if joined else words
    return " ".join(out)


def _views(hint: str) -> list[str]:
    """The normalised hint, and the hint with runs of tokens of at most two characters, of digit
    groups and of number words joined (the answer's digits or letters written apart or in chunks)."""
    hint = normalised(hint)
    tokens = _TOKEN.findall(hint)
    digits = [_NUMBER_WORDS.get(t, t) for t in tokens]
    return [
        hint,
        _joined(tokens, [len(t) <= 2 for t in tokens]),
        _joined(digits, [t.isdigit() for t in digits]),
    ]


def stated_in(hint: str, secret: str) -> str | None:
    """How the hint states ``secret``: ``"token"`` (a whole token of it), ``"disguised"`` (one of the
    other forms of the module docstring but the list rank, which needs the other seeds), or ``None``."""
    views = _views(hint)
    compact = "".join(_TOKEN.findall(secret))
    if contains(views[0], secret):
        return "token"
    if len(compact) >= JOINED_MIN and any(contains(view, form) for view in views for form in (compact, compact[::-1])):
        return "disguised"
    if len(secret) >= JOINED_MIN and contains(views[0], secret[::-1]):
        return "disguised"
    words = _TOKEN.findall(secret)
    if len(words) >= 2 and all(len(w) >= SHORT_ANSWER for w in words):
        tokens, at = _TOKEN.findall(views[0]), 0
        for word in words:  # each word a token of the hint, in order
            try:
                at = tokens.index(word, at) + 1
            except ValueError:
                return None
        return "disguised"
    return None


def _rank(hint: str, answer: str, answers: set[str]) -> int | None:
    """The place of ``answer`` among the known ``answers`` in ``hint``, by first occurrence."""
    places = {a: hint.find(a) for a in answers}
    shown = sorted((at, a) for a, at in places.items() if at >= 0 and contains(hint, a))
    order = [a for _, a in shown]
    return order.index(answer) if answer in order and len(order) > 1 else None


def _ranked(hints: Mapping[int, str], answers: Mapping[int, str]) -> list[int]:
    """Seeds whose answer, listed in a hint among other known answers, holds the rank most of them share."""
    known = set(answers.values())
    ranks = {seed: _rank(hints[seed], answers[seed], known) for seed in answers}
    listed = {seed: rank for seed, rank in ranks.items() if rank is not None}
    if len(listed) < 2:
        return []
    rank, count = Counter(listed.values()).most_common(1)[0]

    def order(hint: str) -> tuple[str, ...]:
        return tuple(sorted(known, key=lambda a: (hint.find(a) < 0, hint.find(a))))

    orders = {order(hints[s]) for s in listed}
    if len(orders) == 1 or count < RANK_SHARE * len(answers):  # one fixed list: boilerplate
        return []
    return sorted(seed for seed, r in listed.items() if r == rank)


def hint_states_answer(firsts: Mapping[int, tuple[str, str, str]], steps: Iterable[str] = ()) -> list[int]:
    """The seeds (ascending) whose hint, read at the start of the episode, states the answer.

    ``firsts``: ``{seed: (hint, the oracle's last action, first observation)}``; ``steps``: the
    oracle's other actions, never counted. An answer in the hints of at least :data:`COMMON_IN_HINTS`
    of the other seeds is boilerplate unless its rank gives it away; what may be chance (a short
    answer, a disguised form, a rank) counts only when more than that share of all hints state theirs.
    """
    hints = {seed: normalised(hint) for seed, (hint, _, _) in firsts.items()}
    found = {seed: secrets(action, observation) for seed, (_, action, observation) in firsts.items()}
    moves = {secret for step in steps for secret in secrets(step, "")}
    stated: list[int] = []
    short: list[int] = []
    common: dict[int, str] = {}
    for seed in sorted(found):
        for secret in found[seed]:
            form = None if secret in moves else stated_in(hints[seed], secret)
            if form is None:
                continue
            others = [other for other in found if other != seed and secret not in found[other]]
            common_count = sum(stated_in(hints[other], secret) is not None for other in others)
            if others and common_count >= COMMON_IN_HINTS * len(others):
                common.setdefault(seed, secret)
                continue
            (short if len(secret) <= SHORT_ANSWER or form == "disguised" else stated).append(seed)
            break
    answers = {seed: found[seed][0] for seed in found if found[seed] and found[seed][0] not in moves}
    short += [seed for seed in _ranked(hints, answers) if seed in common and seed not in stated + short]
    if len(short) + len(stated) > COMMON_IN_HINTS * len(found):  # most hints state theirs: no coincidence
        stated += short
    return sorted(set(stated))
