#!/usr/bin/env python3
"""Checks toolplane's provider wire fixtures against the providers' own SDK types.

The fixtures in ./fixtures/<format>/<kind>__<case>.json are written by the Rust test
`libs/toolplane-model/tests/integration/sdk_fixtures.rs`: the tools, tool choices, tool-result messages,
assistant histories and histories trimmed to a context budget toolplane emits, and the sample
responses its decoder is tested on. Each file is
validated with pydantic against the SDK type the provider's own client would send or receive
(`openai`, `anthropic`, `google-genai`, versions pinned in requirements.txt):

1. `TypeAdapter(T)` validation — strict for the SDKs' TypedDict request params, over JSON for
   their pydantic models (so Gemini's base64 `thoughtSignature` is checked as bytes);
2. a recursive key check: TypedDicts silently ignore unknown keys and the OpenAI / Anthropic
   response models allow extras, so every key at every depth must be one the SDK type declares
   (under its wire name: camelCase for google-genai), and lazily validated iterables are
   validated item by item; google-genai's lenient enums (unknown values only warn) count as errors;
3. the message roles the SDK types leave open (Gemini's `role` is any string).

Then a self-check applies known mistakes (an unknown key, a snake_case Gemini field, a missing
`strict`, …) to copies of the fixtures and fails unless every one is refused, so an SDK upgrade
that blinds the introspection cannot turn the check into one that always passes.

Set-up: python3 -m venv /tmp/sdkvenv && /tmp/sdkvenv/bin/pip install -r tests/provider-sdk/requirements.txt
Usage: /tmp/sdkvenv/bin/python tests/provider-sdk/check.py [fixtures-dir]
Prints one line per fixture and "N passed, N failed"; exits non-zero on any failure.
"""

from __future__ import annotations

import collections.abc
import functools
import json
import pathlib
import sys
import tempfile
import types
import typing
import warnings
from typing import Any, Callable, Dict, List, Union

import pydantic
import typing_extensions as te
from pydantic import TypeAdapter

import anthropic.types as A
import openai.types.chat as OC
import openai.types.responses as OR
from google.genai import types as G
from openai.types.responses import response_create_params, response_input_item_param

HERE = pathlib.Path(__file__).resolve().parent

Extra = Callable[[Any], List[str]]


def _no_extra(_: Any) -> List[str]:
    return []


def _anthropic_blocks_are(block_type: Any) -> Extra:
    """Every content block of every message validates as `block_type`."""

    def check(messages: Any) -> List[str]:
        out: List[str] = []
        for i, message in enumerate(messages):
            for j, block in enumerate(message.get("content", [])):
                path = f"$[{i}].content[{j}]"
                out += _validate(block_type, block, path)
                out += key_problems(block_type, block, path)
        return out

    return check


# (format, kind) or (format, kind__case) -> (label, SDK type, an extra check of the whole value)
SPEC: Dict[tuple, tuple] = {
    # OpenAI Chat Completions
    ("openai_chat", "tools"): (
        "list[openai.types.chat.ChatCompletionFunctionToolParam]",
        List[OC.ChatCompletionFunctionToolParam],
        _no_extra,
    ),
    ("openai_chat", "tool_choice"): (
        "openai.types.chat.ChatCompletionToolChoiceOptionParam",
        OC.ChatCompletionToolChoiceOptionParam,
        _no_extra,
    ),
    ("openai_chat", "input__response"): (
        "openai.types.chat.ChatCompletion",
        OC.ChatCompletion,
        _no_extra,
    ),
    ("openai_chat", "input__assistant"): (
        "openai.types.chat.ChatCompletionMessage",
        OC.ChatCompletionMessage,
        _no_extra,
    ),
    ("openai_chat", "history"): (
        "list[openai.types.chat.ChatCompletionAssistantMessageParam]",
        List[OC.ChatCompletionAssistantMessageParam],
        _no_extra,
    ),
    ("openai_chat", "results"): (
        "list[openai.types.chat.ChatCompletionToolMessageParam]",
        List[OC.ChatCompletionToolMessageParam],
        _no_extra,
    ),
    ("openai_chat", "trimmed"): (
        "list[openai.types.chat.ChatCompletionMessageParam]",
        List[OC.ChatCompletionMessageParam],
        _no_extra,
    ),
    # OpenAI Responses
    ("openai_responses", "tools"): (
        "list[openai.types.responses.FunctionToolParam]",
        List[OR.FunctionToolParam],
        _no_extra,
    ),
    ("openai_responses", "tool_choice"): (
        "openai.types.responses.response_create_params.ToolChoice",
        response_create_params.ToolChoice,
        _no_extra,
    ),
    ("openai_responses", "input__response"): (
        "openai.types.responses.Response",
        OR.Response,
        _no_extra,
    ),
    ("openai_responses", "input__assistant"): (
        "list[openai.types.responses.ResponseOutputItem]",
        List[OR.ResponseOutputItem],
        _no_extra,
    ),
    ("openai_responses", "history"): (
        "list[openai.types.responses.ResponseInputItemParam]",
        List[OR.ResponseInputItemParam],
        _no_extra,
    ),
    ("openai_responses", "results"): (
        "list[openai.types.responses.response_input_item_param.FunctionCallOutput]",
        List[response_input_item_param.FunctionCallOutput],
        _no_extra,
    ),
    ("openai_responses", "trimmed"): (
        "list[openai.types.responses.ResponseInputItemParam]",
        List[OR.ResponseInputItemParam],
        _no_extra,
    ),
    # Anthropic Messages
    ("anthropic_messages", "tools"): (
        "list[anthropic.types.ToolParam]",
        List[A.ToolParam],
        _no_extra,
    ),
    ("anthropic_messages", "tool_choice"): (
        "anthropic.types.ToolChoiceParam",
        A.ToolChoiceParam,
        _no_extra,
    ),
    ("anthropic_messages", "input__response"): (
        "anthropic.types.Message",
        A.Message,
        _no_extra,
    ),
    ("anthropic_messages", "input__assistant"): (
        "anthropic.types.MessageParam",
        A.MessageParam,
        _no_extra,
    ),
    ("anthropic_messages", "history"): (
        "list[anthropic.types.MessageParam]",
        List[A.MessageParam],
        _no_extra,
    ),
    ("anthropic_messages", "results"): (
        "list[anthropic.types.MessageParam] of anthropic.types.ToolResultBlockParam",
        List[A.MessageParam],
        _anthropic_blocks_are(A.ToolResultBlockParam),
    ),
    ("anthropic_messages", "trimmed"): (
        "list[anthropic.types.MessageParam]",
        List[A.MessageParam],
        _no_extra,
    ),
    # Gemini (google-genai pydantic models; wire names are their camelCase aliases)
    ("gemini", "tools"): ("list[google.genai.types.Tool]", List[G.Tool], _no_extra),
    ("gemini", "tool_config"): ("google.genai.types.ToolConfig", G.ToolConfig, _no_extra),
    ("gemini", "input__response"): (
        "google.genai.types.GenerateContentResponse",
        G.GenerateContentResponse,
        _no_extra,
    ),
    ("gemini", "input__assistant"): ("google.genai.types.Content", G.Content, _no_extra),
    ("gemini", "history"): ("list[google.genai.types.Content]", List[G.Content], _no_extra),
    ("gemini", "results"): ("list[google.genai.types.Content]", List[G.Content], _no_extra),
    ("gemini", "trimmed"): ("list[google.genai.types.Content]", List[G.Content], _no_extra),
}

# Per-fixture facts the SDK types cannot express on their own.
ROLES = {
    ("openai_chat", "results"): "tool",
    ("anthropic_messages", "input__assistant"): "assistant",
    ("anthropic_messages", "history"): "assistant",
    ("anthropic_messages", "results"): "user",
    ("gemini", "history"): "model",
    ("gemini", "results"): "user",
}


# --------------------------------------------------------------------------------------------
# validation


@functools.lru_cache(maxsize=None)
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _has_model(tp: Any) -> bool:
    """Whether a type is, or is a list/union of, pydantic models (validated over JSON)."""
    tp = _unwrap(tp)
    if _is_model(tp):
        return True
    return any(_has_model(a) for a in typing.get_args(tp) if a is not type(None))


def _validate(tp: Any, value: Any, path: str = "$", json_mode: bool | None = None) -> List[str]:
    """Validates a value as the SDK would: request-param TypedDicts strictly from Python values,
    pydantic models (and everything inside them) from JSON text, as they come off the wire."""
    if json_mode is None:
        json_mode = _has_model(tp)
    try:
        # google-genai accepts unknown enum values with a warning (forward compatibility); for
        # what we emit, an unknown value is an error.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if json_mode:
                _adapter(tp).validate_json(json.dumps(value))
            else:
                _adapter(tp).validate_python(value, strict=True)
        return [f"{path}: {w.message}" for w in caught if "is not a valid" in str(w.message)]
    except pydantic.ValidationError as e:
        return [f"{path}: {err['loc']}: {err['msg']}" for err in e.errors()[:5]]


_WRAPPERS = {te.Required, te.NotRequired, te.ReadOnly, typing.Required, typing.NotRequired}


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin in _WRAPPERS or origin is typing.Annotated or origin is te.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        return tp


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def key_problems(tp: Any, value: Any, path: str = "$", json_mode: bool | None = None) -> List[str]:
    """Keys the SDK type does not declare, at any depth, plus items of lazily validated iterables
    that do not validate. Union members are tried in the root's validation mode."""
    if json_mode is None:
        json_mode = _has_model(tp)
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if tp is Any or tp is object or value is None:
        return []
    if origin is Union or origin is types.UnionType:
        best = None
        for member in typing.get_args(tp):
            if member is type(None) or _validate(member, value, path, json_mode):
                continue
            found = key_problems(member, value, path, json_mode)
            if not found:
                return []
            if best is None or len(found) < len(best):
                best = found
        return best if best is not None else [f"{path}: matches no member of {_type_name(tp)}"]
    if te.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: expected an object ({_type_name(tp)})"]
        hints = typing.get_type_hints(tp, include_extras=True)
        return _fields(tp, hints, value, path, json_mode)
    if _is_model(tp):
        if not isinstance(value, dict):
            return [f"{path}: expected an object ({_type_name(tp)})"]
        hints = {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
        return _fields(tp, hints, value, path, json_mode)
    args = typing.get_args(tp)
    if isinstance(value, list) and len(args) == 1:
        out: List[str] = []
        for i, item in enumerate(value):
            out += _validate(args[0], item, f"{path}[{i}]", json_mode)
            out += key_problems(args[0], item, f"{path}[{i}]", json_mode)
        return out
    if isinstance(value, dict) and len(args) == 2 and origin in (dict, collections.abc.Mapping):
        out = []
        for k, v in value.items():
            out += key_problems(args[1], v, f"{path}.{k}", json_mode)
        return out
    return []


def _fields(
    tp: Any, hints: Dict[str, Any], value: dict, path: str, json_mode: bool
) -> List[str]:
    out: List[str] = []
    for key, item in value.items():
        if key not in hints:
            out.append(f"{path}.{key}: not a field of {_type_name(tp)}")
        else:
            out += key_problems(hints[key], item, f"{path}.{key}", json_mode)
    return out


def lookup(fmt: str, stem: str) -> tuple | None:
    """The SDK spec of a fixture: by `kind__case` first (inputs differ per case), then by kind."""
    kind = stem.partition("__")[0]
    return SPEC.get((fmt, stem)) or SPEC.get((fmt, kind))


def check_file(path: pathlib.Path) -> List[str]:
    fmt, kind = path.parent.name, path.stem.partition("__")[0]
    spec = lookup(fmt, path.stem)
    if spec is None:
        return [f"no SDK type is mapped for ({fmt}, {kind})"]
    _, tp, extra = spec
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return [f"unreadable: {e}"]
    problems = _validate(tp, value) or key_problems(tp, value)
    problems += extra(value)
    role = ROLES.get((fmt, kind))
    if role is not None:
        for i, message in enumerate(value):
            if message.get("role") != role:
                problems.append(f"$[{i}].role: is {message.get('role')!r}, expected {role!r}")
    return problems


def _set(path: List[Any], value: Any) -> Callable[[Any], None]:
    def mutate(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return mutate


def _delete(path: List[Any]) -> Callable[[Any], None]:
    def mutate(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        del doc[path[-1]]

    return mutate


def _rename(path: List[Any], old: str, new: str) -> Callable[[Any], None]:
    def mutate(doc: Any) -> None:
        for key in path:
            doc = doc[key]
        doc[new] = doc.pop(old)

    return mutate


# Mistakes the checker must catch, each applied to a copy of a real fixture. They keep the checker
# honest across SDK upgrades: if introspection ever stops seeing a type, these fail first.
MUTATIONS = [
    ("openai_chat/tools__all.json", "an unknown key in a function", _set([0, "function", "strict_mode"], True)),
    ("openai_chat/results__response.json", "a tool message without tool_call_id", _delete([0, "tool_call_id"])),
    ("openai_chat/history__response.json", "an unknown key inside tool_calls", _set([0, "tool_calls", 0, "index"], 0)),
    ("openai_chat/history__response.json", "non-text arguments inside tool_calls", _set([0, "tool_calls", 0, "function", "arguments"], {})),
    ("openai_chat/tool_choice__specific.json", "a Responses-style named choice", _set(["name"], "dice_roll")),
    ("openai_responses/tools__all.json", "a function tool without strict", _delete([0, "strict"])),
    ("openai_responses/results__response.json", "a chat-style output item", _rename([0], "call_id", "tool_call_id")),
    ("anthropic_messages/tools__all.json", "an OpenAI-style parameters key", _rename([0], "input_schema", "parameters")),
    ("anthropic_messages/results__response.json", "a string is_error", _set([0, "content", 0, "is_error"], "yes")),
    ("anthropic_messages/results__response.json", "an unknown key in a tool_result", _set([0, "content", 0, "call_id"], "x")),
    ("anthropic_messages/tool_choice__required.json", "an OpenAI-style required choice", _set(["type"], "required")),
    ("gemini/tools__all.json", "a snake_case field name", _rename([0], "functionDeclarations", "function_declarations")),
    ("gemini/tool_config__auto.json", "an unknown calling mode", _set(["functionCallingConfig", "mode"], "REQUIRED")),
    ("gemini/results__response.json", "a function role", _set([0, "role"], "function")),
    ("gemini/input__response.json", "a thought signature that is not base64", _set(["candidates", 0, "content", "parts", 2, "thoughtSignature"], "not base64!")),
]


def self_check(root: pathlib.Path, tmp: pathlib.Path) -> List[tuple]:
    """Applies each mutation to a copy of its fixture and reports whether the check caught it."""
    outcomes = []
    for rel, what, mutate in MUTATIONS:
        source = root / rel
        if not source.exists():
            outcomes.append((rel, what, False, "fixture missing"))
            continue
        doc = json.loads(source.read_text(encoding="utf-8"))
        try:
            mutate(doc)
        except (KeyError, IndexError, TypeError) as e:
            outcomes.append((rel, what, False, f"mutation does not apply: {e!r}"))
            continue
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc), encoding="utf-8")
        caught = bool(check_file(target))
        outcomes.append((rel, what, caught, "" if caught else "accepted by the check"))
    return outcomes


def main(argv: List[str]) -> int:
    root = pathlib.Path(argv[1]) if len(argv) > 1 else HERE / "fixtures"
    files = sorted(root.glob("*/*.json"))
    if not files:
        print(f"no fixtures under {root}; run the Rust test sdk_fixtures first")
        return 1
    passed = failed = 0
    for path in files:
        rel = path.relative_to(root).as_posix()
        spec = lookup(path.parent.name, path.stem)
        label = spec[0] if spec else "?"
        problems = check_file(path)
        if problems:
            failed += 1
            print(f"FAIL {rel} ({label})")
            for p in problems:
                print(f"     {p}")
        else:
            passed += 1
            print(f"ok   {rel} ({label})")
    with tempfile.TemporaryDirectory() as tmp:
        for rel, what, caught, note in self_check(root, pathlib.Path(tmp)):
            if caught:
                passed += 1
                print(f"ok   self-check {rel}: {what} is refused")
            else:
                failed += 1
                print(f"FAIL self-check {rel}: {what}: {note}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
