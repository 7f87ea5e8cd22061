"""An OpenEnv-protocol server that misbehaves on purpose (the tests start it as a real process):
``python bad_server.py PORT MODE`` with MODE one of

* ``garbage``: answers reset with text that is not JSON;
* ``malformed``: answers reset with JSON outside the protocol (an observation that is a string, reward "high");
* ``nan``: a step reward of NaN;
* ``bigreward``: a step reward that is an integer too large for a float (1 and 400 zeros);
* ``badschema``: a /schema whose action schema is not an object schema (properties a list, required a number);
* ``hang``: never answers a step;
* ``crash``: the process exits on a step;
* ``dies``: the first step answers (reward 1, done), the process exits on the second;
* ``one_session``: a well-behaved server (reward 1 per step, done) that serves one /ws session at a time and
  refuses another as openenv-core does (``CAPACITY_REACHED`` with its ``max_sessions``, then closes it);
* ``full``: refuses every /ws session that way;
* ``trickle``: answers /step one byte every 0.2 s (each read is quick, the whole answer slow);
* ``hugereward``: finite step rewards of 1e308 that never end the episode (their sum overflows to inf);
* ``hostile``: observations of 1 MB with control characters and lone surrogates;
* ``error``: every step is an EXECUTION_ERROR on /ws and HTTP 422 over HTTP (a refused action).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from fastapi import FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse, StreamingResponse

MODE = sys.argv[2]
app = FastAPI()
SCHEMA = {"type": "object", "properties": {"move": {"type": "string", "enum": ["left", "right"]}},
          "required": ["move"]}


def _reset() -> object:
    if MODE == "malformed":
        return {"observation": "nothing", "reward": "high", "done": "no"}
    return {"observation": {"text": "Go left or right."}, "reward": None, "done": False}


STEPS = [0]


async def _step() -> str:
    STEPS[0] += 1
    if MODE == "dies" and STEPS[0] > 1:
        os._exit(3)
    if MODE == "hang":
        await asyncio.sleep(3600)
    if MODE == "crash":
        os._exit(3)
    if MODE == "nan":
        return '{"observation": {"text": "x"}, "reward": NaN, "done": true}'
    if MODE == "hugereward":
        return '{"observation": {"text": "x"}, "reward": 1e308, "done": false}'
    if MODE == "bigreward":
        return '{"observation": {"text": "x"}, "reward": 1' + "0" * 400 + ', "done": true}'
    if MODE == "hostile":
        text = "\x1b[31m\x00\ud800" + "A" * 1_000_000
        return json.dumps({"observation": {"text": text}, "reward": 0.0, "done": False})
    return json.dumps({"observation": {"text": "ok"}, "reward": 1.0, "done": True})


@app.get("/health")
def health() -> dict:
    return {"status": "healthy"}


@app.get("/schema")
def schema() -> dict:
    if MODE == "badschema":
        return {"action": {"type": "object", "properties": ["move"], "required": 5}, "observation": {}, "state": {}}
    return {"action": SCHEMA, "observation": {}, "state": {}}


@app.post("/reset")
def reset() -> object:
    if MODE == "garbage":
        return PlainTextResponse("<html>Bad gateway</html>")
    return _reset()


@app.post("/step")
async def step() -> object:
    if MODE == "trickle":
        body = json.dumps({"observation": {"text": "ok"}, "reward": 1.0, "done": True}).encode()

        async def slowly():
            for byte in body:
                await asyncio.sleep(0.2)
                yield bytes([byte])

        return StreamingResponse(slowly(), media_type="application/json")
    if MODE == "error":
        raise HTTPException(status_code=422, detail="move must be 'left' today")
    return PlainTextResponse(await _step(), media_type="application/json")


@app.get("/state")
def state() -> dict:
    return {"step_count": 0}


ACTIVE = [0]


@app.websocket("/ws")
async def session(websocket: WebSocket) -> None:
    await websocket.accept()
    limit = {"one_session": 1, "full": 0}.get(MODE)
    if limit is not None and ACTIVE[0] >= limit:
        await websocket.send_text(json.dumps({"type": "error", "data": {
            "message": f"Server at capacity: {ACTIVE[0]}/{limit} sessions active", "code": "CAPACITY_REACHED",
            "active_sessions": ACTIVE[0], "max_sessions": limit}}))
        await websocket.close()
        return
    ACTIVE[0] += 1
    try:
        while True:
            message = json.loads(await websocket.receive_text())
            kind = message.get("type")
            if kind == "reset":
                if MODE == "garbage":
                    await websocket.send_text("<html>Bad gateway</html>")
                    continue
                await websocket.send_text(json.dumps({"type": "observation", "data": _reset()}))
            elif kind == "step":
                if MODE == "error":
                    await websocket.send_text(json.dumps({"type": "error", "data": {
                        "message": "move must be 'left' today", "code": "EXECUTION_ERROR"}}))
                    continue
                await websocket.send_text('{"type": "observation", "data": ' + await _step() + "}")
            elif kind == "state":
                await websocket.send_text(json.dumps({"type": "state", "data": {"step_count": 0}}))
            else:
                break
    except WebSocketDisconnect:
        pass
    finally:
        ACTIVE[0] -= 1


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
