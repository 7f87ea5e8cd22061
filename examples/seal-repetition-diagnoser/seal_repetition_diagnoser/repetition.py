"""Turn-level repetition labels, computed from the transcript alone (works for any environment)."""

from seal_platform.types import Trajectory, TurnLabel

SOURCE = "repetition"


def label_repetitions(trajectory: Trajectory) -> list[TurnLabel]:
    """One label per user turn: does an assistant message in it repeat an earlier one verbatim?"""
    labels: list[TurnLabel] = []
    seen: set[str] = set()
    turn = -1
    repeated: str | None = None
    for message in trajectory.messages:
        if message.role == "user":
            if turn >= 0:
                labels.append(_label(trajectory, turn, repeated))
            turn, repeated = turn + 1, None
        elif message.role == "assistant":
            text = message.content.strip()
            if text and text in seen and repeated is None:
                repeated = text
            seen.add(text)
    if turn >= 0:
        labels.append(_label(trajectory, turn, repeated))
    return labels


def _label(trajectory: Trajectory, turn: int, repeated: str | None) -> TurnLabel:
    if repeated is None:
        return TurnLabel(trajectory_id=trajectory.id, turn=turn, label="no_repetition", source=SOURCE)
    return TurnLabel(trajectory_id=trajectory.id, turn=turn, label="repetition", source=SOURCE,
                     rationale=f"repeats an earlier message: {repeated[:80]!r}")
