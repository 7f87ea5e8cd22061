"""A tiny OpenEnv-protocol environment server (no openenv-core needed): set a thermostat to a target.

It speaks the wire format of openenv-core's HTTP server, which the openenv plugin reads (docs/openenv.md):

* ``GET /health``, ``GET /schema`` (the action's, observation's and state's JSON schemas);
* ``/ws``: one WebSocket session per connection, each with its own environment (``reset``/``step``/``state``/
  ``close`` messages) -- the openenv-core protocol for multi-step episodes;
* ``POST /reset``, ``POST /step``, ``GET /state`` on one shared environment (servers that keep one environment
  over HTTP; the plugin's ``http`` transport).

The environment: ``reset(seed)`` puts the room at some temperature and names a target; an action turns the
heat ``up`` or ``down`` by 1 to 5 degrees; the episode ends with reward 1 when the room is on target, or with
reward 0 after 4 steps. Run: ``python server.py --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from typing import Any, Literal

from fastapi import Body, FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_STEPS = 4


class ThermostatAction(BaseModel):
    """Turn the heat up or down."""

    model_config = ConfigDict(extra="forbid")

    direction: Literal["up", "down"] = Field(description="Which way to turn the heat.")
    degrees: int = Field(ge=1, le=5, description="By how many degrees (1 to 5).")
    metadata: dict[str, Any] = Field(default_factory=dict)  # openenv-core's Action base has it


class ThermostatObservation(BaseModel):
    message: str
    temperature: int
    target: int


class ThermostatState(BaseModel):
    episode_id: str | None = None
    step_count: int = 0
    temperature: int = 0
    target: int = 0


class Thermostat:
    def __init__(self) -> None:
        self.state = ThermostatState()

    def _result(self, reward: float | None, done: bool, note: str = "") -> dict[str, Any]:
        s = self.state
        message = f"The room is at {s.temperature} degrees. " + (
            note or f"Bring it to {s.target} degrees.")
        observation = ThermostatObservation(message=message, temperature=s.temperature, target=s.target)
        return {"observation": observation.model_dump(), "reward": reward, "done": done}

    def reset(self, seed: int | None = None, episode_id: str | None = None, **_: Any) -> dict[str, Any]:
        rng = random.Random(seed)
        start = rng.randint(15, 25)
        target = rng.choice([t for t in range(17, 24) if t != start])
        self.state = ThermostatState(episode_id=episode_id or uuid.uuid4().hex, temperature=start, target=target)
        return self._result(None, False)

    def step(self, action: ThermostatAction) -> dict[str, Any]:
        s = self.state
        s.step_count += 1
        s.temperature += action.degrees if action.direction == "up" else -action.degrees
        if s.temperature == s.target:
            return self._result(1.0, True, "On target.")
        if s.step_count >= MAX_STEPS:
            return self._result(0.0, True, f"Out of steps; the target was {s.target} degrees.")
        return self._result(0.0, False)


app = FastAPI(title="thermostat (OpenEnv protocol)")
_shared = Thermostat()  # the HTTP endpoints' one environment


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return json.loads(exc.json(include_url=False))


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "healthy"}


@app.get("/schema")
def schema() -> dict[str, Any]:
    return {"action": ThermostatAction.model_json_schema(), "observation": ThermostatObservation.model_json_schema(),
            "state": ThermostatState.model_json_schema()}


@app.post("/reset")
def reset(request: dict[str, Any] = Body(default={})) -> dict[str, Any]:  # noqa: B008 - FastAPI's idiom
    return _shared.reset(**request)


@app.post("/step")
def step(request: dict[str, Any]) -> dict[str, Any]:
    try:
        action = ThermostatAction.model_validate(request.get("action", {}))
    except ValidationError as exc:
        raise HTTPException(status_code=422, detail=_errors(exc)) from None
    return _shared.step(action)


@app.get("/state")
def state() -> dict[str, Any]:
    return _shared.state.model_dump()


@app.websocket("/ws")
async def session(websocket: WebSocket) -> None:
    await websocket.accept()
    env = Thermostat()
    try:
        while True:
            try:
                message = json.loads(await websocket.receive_text())
            except json.JSONDecodeError as exc:
                await websocket.send_json({"type": "error", "data": {"message": f"Invalid JSON: {exc}",
                                                                      "code": "INVALID_JSON"}})
                continue
            kind = message.get("type") if isinstance(message, dict) else None
            data = message.get("data") or {} if isinstance(message, dict) else {}
            if kind == "reset":
                answer = {"type": "observation", "data": env.reset(**data)}
            elif kind == "step":
                try:
                    answer = {"type": "observation", "data": env.step(ThermostatAction.model_validate(data))}
                except ValidationError as exc:
                    answer = {"type": "error", "data": {"message": "Invalid message", "code": "VALIDATION_ERROR",
                                                        "errors": _errors(exc)}}
            elif kind == "state":
                answer = {"type": "state", "data": env.state.model_dump()}
            elif kind == "close":
                break
            else:
                answer = {"type": "error", "data": {"message": f"Unknown message type: {kind}",
                                                    "code": "UNKNOWN_TYPE"}}
            await websocket.send_json(answer)
    except WebSocketDisconnect:
        pass


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
