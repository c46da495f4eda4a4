#!/usr/bin/env python3
"""Checks the engine's chat formats against jinja2 on the models' own chat templates.

Usage (from the project root, after building tokenizer_test; needs the PyPI package `jinja2`,
e.g. python3 -m venv /tmp/venv-chat && /tmp/venv-chat/bin/pip install jinja2):
    /tmp/venv-chat/bin/python scripts/check_chat_templates.py [TEMPLATE.jinja ...]
        [--tokenizer-test ./build/tests/tokenizer_test] [--count N] [--seed S]

TEMPLATE defaults to every tests/tokenizer/data/deepseek-r1/*.jinja and qwen2.5/*.jinja: the
chat_template of each DeepSeek-R1 revision (the README there says where each text comes from;
r1-distill: the R1 distills' as first released; r1-distill-think: their later revision; r1:
DeepSeek-R1's later revision; r1-0528 and r1-0528-qwen3-8b: DeepSeek-R1-0528's and its Qwen3-8B
distill's) and Qwen2.5-Instruct's. Each template is rendered by jinja2 the way Hugging Face's
apply_chat_template renders it (a sandboxed environment with trim_blocks and lstrip_blocks, the
loopcontrols extension, raise_exception, and tojson as json.dumps with ensure_ascii=False; messages,
add_generation_prompt, bos_token, eos_token and tools as arguments), with and without the
generation prompt, on a fixed set of conversations and N random ones of system, user and assistant
messages (contents with and without reasoning blocks, several "</think>", empty, multi-line and
non-ASCII text, special-token text). For a template that renders tools (Qwen2.5's), the random
conversations also hold tool messages and assistant messages with tool calls (nested in "function"
or not; arguments with nested objects, numbers, escapes and non-ASCII text; content empty, null or
text), and half of them offer one to three tools. The same templates and conversations go to
tokenizer_test (ChatTemplateJinja.RenderCasesFromScript), which detects the format from each
template with detect_chat_format and renders with render_chat_request. The script prints, per
template, the format detected, the number of renders and the number that differ from jinja2's.

Exit status 0 when every template is recognised and every render equals jinja2's, 1 otherwise (the
first differences are printed).
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE_DIRS = [os.path.join(ROOT, "tests", "tokenizer", "data", d) for d in ("deepseek-r1", "qwen2.5")]
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"

CONTENTS = [
    "",
    "Hi",
    "你好，世界",
    "1+1?",
    "  padded  ",
    "line one\nline two\n",
    "\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<think>a</think>b</think> c ",
    "</think>",
    "no reasoning, then </think>",
    "<think>\nunclosed reasoning",
    "tab\tand emoji 😀",
    "<｜User｜>text of a marker<｜Assistant｜>",
    "{{ not a template }} {% neither %}",
    "You are a helpful assistant.",
]

FIXED = [
    [],
    [{"role": "user", "content": "你好"}],
    [{"role": "system", "content": "S1"}, {"role": "user", "content": "Q"}],
    [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"}, {"role": "user", "content": "Q"}],
    [{"role": "user", "content": "A"}, {"role": "system", "content": "S1"},
     {"role": "assistant", "content": "x</think>y</think> z "}, {"role": "system", "content": "S2"}],
    [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"},
     {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n2"}],
    [{"role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}],
    [{"role": "system", "content": ""}, {"role": "system", "content": ""}, {"role": "user", "content": "Q"}],
    [{"role": "user", "content": "Q"}, {"role": "system", "content": "late"}],
]


def hf_environment():
    """The environment transformers' _compile_jinja_template builds (without its AssistantTracker
    extension, which only records {% generation %} blocks)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "城市, e.g. \"Paris\""},
                                          "unit": {"type": "string", "enum": ["c", "f"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number", "minimum": -1.5}}}}},
    {"name": "now", "description": "tab\tand newline\n", "parameters": {}},
]
ARGUMENTS = [{}, {"city": "Paris"}, {"city": "São Paulo", "unit": "c"}, {"a": 1, "b": 2.5e-07},
             {"nested": {"list": [1, "two", None, True, False], "quote": "\"x\"\\"}}, "a plain string"]


def tool_call(rng):
    call = {"name": rng.choice(["get_weather", "add", "now"]), "arguments": rng.choice(ARGUMENTS)}
    return {"type": "function", "function": call} if rng.random() < 0.7 else call


def random_message(rng, tools):
    roles = ["system", "user", "user", "assistant", "assistant"] + (["tool", "tool", "assistant"] if tools else [])
    role = rng.choice(roles)
    if role == "assistant" and tools and rng.random() < 0.5:
        return {"role": "assistant", "content": rng.choice([None, "", rng.choice(CONTENTS)]),
                "tool_calls": [tool_call(rng) for _ in range(rng.randint(1, 3))]}
    return {"role": role, "content": rng.choice(CONTENTS)}


def conversations(count, rng, tools):
    for msgs in FIXED:
        yield msgs, None
    for _ in range(count):
        n = rng.randint(1 if tools else 0, 8)  # Qwen2.5's template reads messages[0]
        msgs = [random_message(rng, tools) for _ in range(n)]
        offered = rng.sample(TOOLS, rng.randint(1, 3)) if tools and rng.random() < 0.5 else None
        yield msgs, offered


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("templates", nargs="*", help="chat template files (default: the DeepSeek-R1 revisions)")
    ap.add_argument("--tokenizer-test", default=os.path.join(ROOT, "build", "tests", "tokenizer_test"))
    ap.add_argument("--count", type=int, default=500, help="random conversations per template")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    paths = args.templates or sorted(p for d in TEMPLATE_DIRS for p in glob.glob(os.path.join(d, "*.jinja")))
    if not paths:
        sys.exit("no chat templates found")

    env = hf_environment()
    templates, cases, expected = [], [], []
    for ti, path in enumerate(paths):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.endswith("\n"):  # the file's own newline; tokenizer_config.json has none
            text = text[:-1]
        templates.append({"text": text, "bos": BOS, "eos": EOS})
        compiled = env.from_string(text)
        rng = random.Random(args.seed * 1000 + ti)
        renders_tools = "<tool_response>" in text
        for msgs, tools in conversations(args.count, rng, renders_tools):
            if renders_tools and not msgs:
                continue  # the template reads messages[0]; render_chat_request refuses it too
            for add_generation_prompt in (True, False):
                try:
                    want = compiled.render(messages=msgs, add_generation_prompt=add_generation_prompt,
                                           bos_token=BOS, eos_token=EOS, tools=tools)
                except jinja2.exceptions.TemplateError as e:
                    want = {"error": str(e)}
                case = {"template": ti, "messages": msgs, "add_generation_prompt": add_generation_prompt}
                if tools:
                    case["tools"] = tools
                cases.append(case)
                expected.append(want)

    with tempfile.TemporaryDirectory() as d:
        cases_path, renders_path = os.path.join(d, "cases.json"), os.path.join(d, "renders.json")
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump({"templates": templates, "cases": cases}, f)
        env_vars = dict(os.environ, TLLM_CHAT_CASES=cases_path, TLLM_CHAT_RENDERS=renders_path)
        run = subprocess.run([args.tokenizer_test, "--gtest_filter=ChatTemplateJinja.*"], env=env_vars,
                             capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(renders_path):
            sys.stdout.write(run.stdout + run.stderr)
            sys.exit("tokenizer_test failed")
        with open(renders_path, encoding="utf-8") as f:
            result = json.load(f)

    failed = False
    shown = 0
    for ti, path in enumerate(paths):
        fmt = result["formats"][ti]
        n = diff = 0
        for case, want, got in zip(cases, expected, result["renders"]):
            if case["template"] != ti:
                continue
            n += 1
            same = "error" in got if isinstance(want, dict) else got.get("text") == want
            if not same:
                diff += 1
                if shown < 5:
                    shown += 1
                    print(f"  {os.path.basename(path)}: {json.dumps(case['messages'], ensure_ascii=False)} "
                          f"add_generation_prompt={case['add_generation_prompt']}\n"
                          f"    jinja2: {json.dumps(want, ensure_ascii=False)}\n"
                          f"    ours:   {json.dumps(got, ensure_ascii=False)}")
        if "error" in fmt:
            desc = "not recognised: " + fmt["error"]
            failed = True
        else:
            flags = [k for k in ("think_prompt", "join_system", "assistant_after_user", "tools") if fmt[k]]
            desc = fmt["kind"] + (" (" + ", ".join(flags) + ")" if flags else "")
        failed = failed or diff > 0
        print(f"{os.path.basename(path)}: {desc}; {n} renders, {diff} differences")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
