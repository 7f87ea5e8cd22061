"""The arithmetic environment: tasks, the prompt, the calculator tool, episodes and the verifier."""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from typing import Any, Literal

from pydantic import Field

from seal_platform.config import Section
from seal_platform.engine import RolloutEngine
from seal_platform.types import Interface, Message, SamplingParams, Task, ToolCall, Trajectory, TurnLabel, TurnVerdict

OPS = {"add": "+", "sub": "-", "mul": "*"}

SYSTEM = (
    "You can use one tool, calculator. Call it as <tool_call>{\"name\": \"calculator\", \"arguments\": "
    "{\"expression\": \"...\"}}</tool_call>. Always call it to compute the answer."
)
EXAMPLES = [("What is 12 + 7?", "12 + 7", "19"), ("What is 9 * 6?", "9 * 6", "54")]

# The reference labels each of our labels maps to (for A-Patch base weights).
REFERENCE_LABELS = {
    "pass": "pass",
    "invalid_tool_call": "empty_turn_model_response",
    "unknown_tool": "empty_turn_model_response",
    "argument_mismatch": "state_mismatch",
    "wrong_final_answer": "response_mismatch",
}

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


class ArithmeticSettings(Section):
    """Settings section ``arithmetic``."""

    n_train: int = Field(default=512, ge=1, le=1_000_000)
    n_eval: int = Field(default=128, ge=1, le=1_000_000)
    seed: int = Field(default=1234, ge=0, le=2**32 - 1)
    max_operand: int = Field(default=99, ge=2, le=10**9)
    operations: list[Literal["add", "sub", "mul"]] = Field(default_factory=lambda: ["add", "sub", "mul"])
    worked_examples: int = Field(default=2, ge=0, le=len(EXAMPLES))
    answer_turn: bool = Field(default=False, description="After the tool result, the model states the answer.")
    max_new_tokens: int | None = Field(
        default=48, ge=1, le=1_048_576, description="Per generation; null: rollout.max_new_tokens."
    )


class _Unsafe(ValueError):
    pass


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> float:
    """Evaluate ``+ - * /`` over numbers with parentheses by walking the AST (never ``eval``)."""
    if len(expression) > 200:
        raise _Unsafe("expression too long")

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        raise _Unsafe(f"unsupported syntax: {type(node).__name__}")

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise _Unsafe(f"not an arithmetic expression: {exc.msg}") from None
    return walk(tree)


def parse_call(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The first ``<tool_call>`` block as ``{"name", "arguments"}``, or (None, why not)."""
    match = _TOOL_CALL.search(text)
    if not match:
        return None, "no <tool_call> block"
    try:
        call = json.loads(match.group(1).strip())
    except json.JSONDecodeError as exc:
        return None, f"tool call is not valid JSON ({exc.msg})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None, "tool call must be a JSON object with a name"
    args = call.get("arguments", {})
    if not isinstance(args, dict):
        return None, "arguments must be a JSON object"
    return {"name": call["name"], "arguments": args}, None


class ArithmeticEnvironment:
    """Tasks and the pristine interface; :meth:`run_episodes` plays a batch of episodes on an engine."""

    name = "arithmetic"

    def __init__(self, settings: ArithmeticSettings | None = None):
        self.settings = settings or ArithmeticSettings()

    def tasks(self, split: str) -> list[Task]:
        s = self.settings
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}: arithmetic has 'train' and 'eval'")
        rng = random.Random(f"{s.seed}:{split}")
        n = s.n_train if split == "train" else s.n_eval
        out = []
        for i in range(n):
            op = s.operations[i % len(s.operations)]
            a, b = rng.randint(2, s.max_operand), rng.randint(2, s.max_operand)
            if op == "mul":
                b = rng.randint(2, 12)
            answer = {"add": a + b, "sub": a - b, "mul": a * b}[op]
            out.append(Task(id=f"{split}-{i}", category=op, split=split,
                            payload={"question": f"What is {a} {OPS[op]} {b}?", "answer": answer}))
        return out

    def pristine_interface(self) -> Interface:
        return Interface(revision=0, system_text=SYSTEM)

    def prompt(self, task: Task, interface: Interface) -> list[Message]:
        messages = [Message(role="system", content=interface.system_text or SYSTEM)]
        for question, expression, result in EXAMPLES[: self.settings.worked_examples]:
            call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
            messages += [
                Message(role="user", content=question),
                Message(role="assistant", content=f"<tool_call>{call}</tool_call>"),
                Message(role="tool", content=result),
            ]
            if self.settings.answer_turn:
                messages.append(Message(role="assistant", content=f"The answer is {result}."))
        messages.append(Message(role="user", content=task.payload["question"]))
        return messages

    def run_episodes(
        self,
        engine: RolloutEngine,
        episodes: list[tuple[Task, str, int]],
        interface: Interface,
        sampling: SamplingParams,
    ) -> list[Trajectory]:
        """Play ``(task, group, sample)`` episodes, all in lock step so the engine batches each turn."""
        convs = [self.prompt(task, interface) for task, _, _ in episodes]
        first = engine.generate(convs, sampling)
        trajs = []
        follow_ups: list[int] = []
        for i, ((task, group, sample), gen) in enumerate(zip(episodes, first)):
            convs[i].append(Message.from_generation(gen))
            traj = Trajectory(task_id=task.id, category=task.category, group=group, sample=sample,
                              interface_revision=interface.revision, finish=gen.finish_reason)
            call, error = parse_call(gen.text)
            checks: dict[str, Any] = {"call": call, "parse_error": error}
            correct = False
            if call is not None:
                record = ToolCall(turn=0, name=call["name"], arguments=call["arguments"])
                if call["name"] != "calculator":
                    record.rejected = f"unknown tool {call['name']!r}"
                    checks["parse_error"] = record.rejected
                else:
                    try:
                        value = calculate(str(call["arguments"].get("expression", "")))
                        record.result = _fmt(value)
                        correct = abs(value - task.payload["answer"]) < 1e-9
                    except (_Unsafe, ZeroDivisionError, OverflowError) as exc:
                        record.error = f"Error during execution: {exc}"
                traj.tool_calls.append(record)
                convs[i].append(Message(role="tool", content=record.result or record.error or record.rejected or ""))
                if self.settings.answer_turn:
                    follow_ups.append(i)
            checks["correct_call"] = correct
            traj.turn_verdicts = [TurnVerdict(turn=0, passed=correct, checks=checks)]
            traj.reward = 1.0 if correct else 0.0
            trajs.append(traj)
        if follow_ups:
            second = engine.generate([convs[i] for i in follow_ups], sampling)
            for i, gen in zip(follow_ups, second):
                convs[i].append(Message.from_generation(gen))
                said = str(episodes[i][0].payload["answer"]) in re.findall(r"-?\d+", gen.text)
                trajs[i].turn_verdicts[0].checks["final_answer"] = said
                if not said:
                    trajs[i].reward = 0.0
                    trajs[i].turn_verdicts[0].passed = False
        for traj, conv in zip(trajs, convs):
            traj.messages = conv
        return trajs

    def diagnose(self, traj: Trajectory, source: str) -> TurnLabel:
        """One label for the single ground-truth turn."""
        checks = traj.turn_verdicts[0].checks if traj.turn_verdicts else {}
        problem = checks.get("parse_error") or ""
        if traj.success:
            label, why = "pass", "right calculator call"
        elif problem.startswith("unknown tool"):
            label, why = "unknown_tool", problem
        elif checks.get("call") is None:
            label, why = "invalid_tool_call", checks.get("parse_error") or "no call"
        elif checks.get("correct_call") and not checks.get("final_answer", True):
            label, why = "wrong_final_answer", "the stated answer differs from the tool's result"
        else:
            label, why = "argument_mismatch", "the expression does not compute the asked quantity"
        return TurnLabel(trajectory_id=traj.id, turn=0, label=label, source=source, rationale=why,
                         reference_label=REFERENCE_LABELS[label])


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.6g}"
