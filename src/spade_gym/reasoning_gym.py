"""``ReasoningGymEnv``: one `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ task as a
single-turn text environment with an environment program's interface, registered as
``spade/ReasoningGym-v0``; trusted code, run in-process (the ``reasoning`` extra).

``reset(seed=s)`` uses dataset seed ``2 * s`` on the ``"train"`` split and ``2 * s + 1`` on ``"eval"``,
so ``"eval"`` is held out whatever seeds training draws. The turn is scored by the task's
``score_answer`` in [0, 1]; the hint is the reference answer (a fixed baseline pool, not a curriculum).
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import gymnasium as gym

from spade_gym.errors import install_hint
from spade_gym.spaces import UnicodeText

__all__ = ["ReasoningGymEnv", "dataset_seed", "task_names"]

Split = Literal["train", "eval"]
_SPLITS: dict[str, int] = {"train": 0, "eval": 1}
#: Longest answer passed to a scorer, in characters (longer answers are cut).
MAX_ACTION_CHARS = 16_384


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(
            f"reasoning-gym environments need the reasoning-gym package: {install_hint('reasoning')}"
        ) from None
    return reasoning_gym


def task_names() -> list[str]:
    """Every reasoning-gym task name, sorted; ImportError (naming the extra) without reasoning-gym."""
    return sorted(_reasoning_gym().factory.DATASETS)


def check_task(task: str) -> str:
    """Return ``task`` if reasoning-gym has it, else ValueError suggesting close names."""
    names = task_names()
    if task not in names:
        close = difflib.get_close_matches(str(task), names, n=3)
        suggestion = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"unknown reasoning-gym task {task!r}{suggestion} (`spade_gym.reasoning_gym.task_names()` "
            f"lists all {len(names)})"
        )
    return task


def dataset_seed(seed: int, split: Split) -> int:
    """The dataset seed of episode seed ``seed`` on ``split``; ValueError for an unknown split or a
    negative seed."""
    if split not in _SPLITS:
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r:.40}")
    return 2 * seed + _SPLITS[split]


class ReasoningGymEnv(gym.Env[str, str]):
    """One reasoning-gym task as a single-turn text environment.

    Args:
        task: a reasoning-gym task name (:func:`task_names`); required.
        split: ``"train"`` or ``"eval"``.
        task_config: keyword arguments for ``reasoning_gym.create_dataset`` (e.g. ``min_digits``).

    ``entry`` is the current problem (reasoning-gym's dict). Raises ImportError without
    reasoning-gym, ValueError for an unknown task or split or a ``task_config`` the task rejects.
    """

    metadata = {"render_modes": []}
    setting = "reasoning"
    max_turns = 1
    tools: tuple[dict[str, Any], ...] = ()

    def __init__(
        self, task: str | None = None, *, split: Split = "train", task_config: dict[str, Any] | None = None
    ) -> None:
        if not isinstance(task, str):
            raise ValueError(
                f"task must be a reasoning-gym task name (str), got {task!r}: e.g. "
                "gym.make('spade/ReasoningGym-v0', task='leg_counting')"
            )
        self.task = check_task(task)
        dataset_seed(0, split)  # checks the split
        self.split: Split = split
        self.task_config = dict(task_config or {})
        self.name = f"ReasoningGym-{task}"
        self.description = f"A {task.replace('_', ' ')} problem (reasoning-gym task {task!r}); one answer, scored once."
        self.observation_space = UnicodeText(max_length=1 << 20)
        self.action_space = UnicodeText(max_length=MAX_ACTION_CHARS)
        self.entry: dict[str, Any] | None = None
        self.episode_seed: int | None = None
        self.episode_return = 0.0
        self._dataset: Any = None
        self._done = True
        try:
            self._make_dataset(0)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ValueError(f"reasoning-gym task {task!r} rejected task_config {self.task_config!r}: {exc}") from exc

    def _make_dataset(self, seed: int) -> Any:
        return _reasoning_gym().create_dataset(self.task, seed=seed, size=1, **self.task_config)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Draw a problem for episode seed ``seed`` (an int >= 0; ``None`` draws one from the
        environment's generator); returns ``(question, {"task", "split", "dataset_seed"})``."""
        super().reset(seed=seed)
        episode_seed = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        data_seed = dataset_seed(episode_seed, self.split)
        self._dataset = self._make_dataset(data_seed)
        self.entry = self._dataset[0]
        self.episode_seed, self.episode_return, self._done = episode_seed, 0.0, False
        return str(self.entry["question"]), {"task": self.task, "split": self.split, "dataset_seed": data_seed}

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Score ``action`` as the final answer: ``(feedback, score, True, False, info)`` with the
        reference ``info["answer"]``; a scorer that fails scores 0 with ``info["score_error"]``."""
        if self._done or self.entry is None:
            return "", 0.0, False, True, {"error": "the episode has ended; call reset()"}
        answer = "" if action is None else str(action)[:MAX_ACTION_CHARS].strip()
        info: dict[str, Any] = {"answer": str(self.entry["answer"])}
        try:
            score = float(self._dataset.score_answer(answer=answer, entry=self.entry))
        except Exception as exc:  # noqa: BLE001 - a scorer's failure on odd text scores 0, it does not end the run
            score, info["score_error"] = 0.0, f"{type(exc).__name__}: {exc}"
        score = min(max(score, 0.0), 1.0) if score == score else 0.0
        self._done = True
        self.episode_return += score
        return ("Correct." if score >= 1.0 else "Incorrect."), score, True, False, info

    def send_step(self, action: Any) -> None:
        """Nothing to start ahead: scoring runs in-process when :meth:`step` is called."""

    def hint(self) -> str:
        """The privileged hint: the reference answer (RuntimeError before ``reset``)."""
        return f"The answer is {self.oracle()}."

    def oracle(self) -> str:
        """The reference answer of the current problem (RuntimeError before ``reset``)."""
        if self.entry is None:
            raise RuntimeError("call reset() before hint() or oracle()")
        return str(self.entry["answer"])
