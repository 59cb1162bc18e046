#!/usr/bin/env python3
"""Lists every command-line flag Megatron-LM's argparse defines, one a line, for
src/emit/megatron_flags.txt: each `add_argument('--...')` name of megatron/training/arguments.py
and of the top-level pretrain_*.py / train_rl.py scripts, plus the flags argument_utils.py's
ArgumentGroupFactory makes from the dataclasses arguments.py hands it (`--field-name`; a bool
field that defaults to True gets `--no-field-name` and `--disable-field-name` instead; an
`argparse_meta` `arg_names` replaces them), less each factory's `exclude` list.

Usage: scripts/megatron_flags.py GIT_DIR COMMIT > src/emit/megatron_flags.txt
"""
import ast
import subprocess
import sys

git_dir, commit = sys.argv[1], sys.argv[2]


def git(*args):
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True,
                          capture_output=True, text=True).stdout


def source(path):
    return git("show", f"{commit}:{path}")


py_files = [p for p in git("ls-tree", "-r", "--name-only", commit).splitlines()
            if p.endswith(".py") and (p.startswith("megatron/") or "/" not in p)]

# Dataclasses by name: fields (name, is_bool, default_true, arg_names) and base names.
classes = {}
for path in py_files:
    try:
        tree = ast.parse(source(path))
    except SyntaxError:
        continue
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        fields = []
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            ann = ast.unparse(item.annotation)
            default = item.value
            names = None
            if isinstance(default, ast.Call) and ast.unparse(default.func).endswith("field"):
                inner = None
                for kw in default.keywords:
                    if kw.arg == "default":
                        inner = kw.value
                    if kw.arg == "metadata":
                        try:
                            meta = ast.literal_eval(kw.value)
                            names = meta.get("argparse_meta", {}).get("arg_names")
                        except ValueError:
                            pass
                    if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                        names = []
                default = inner
            is_bool = ann in ("bool", "Optional[bool]", "bool | None")
            true = isinstance(default, ast.Constant) and default.value is True
            optional = ann != "bool"
            fields.append((item.target.id, is_bool, true, optional, names))
        bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
        classes.setdefault(node.name, (fields, bases))


def all_fields(name, seen=()):
    if name not in classes or name in seen:
        return []
    fields, bases = classes[name]
    out = []
    for base in bases:
        out += all_fields(base, seen + (name,))
    return out + fields


flags = set()


def dashed(name):
    return "--" + name.replace("_", "-")


args_tree = ast.parse(source("megatron/training/arguments.py"))
for func in ast.walk(args_tree):
    if not isinstance(func, ast.FunctionDef):
        continue
    lists = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                lists[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "ArgumentGroupFactory"):
            continue
        cls = ast.unparse(node.args[0]).split(".")[-1]
        exclude = []
        for kw in node.keywords:
            if kw.arg == "exclude":
                if isinstance(kw.value, ast.Name):
                    exclude = lists.get(kw.value.id, [])
                else:
                    exclude = ast.literal_eval(kw.value)
        if cls not in classes:
            sys.exit(f"dataclass {cls} not found")
        for name, is_bool, true, optional, names in all_fields(cls):
            if name in exclude:
                continue
            if names is not None:
                flags.update(n for n in names if n.startswith("--"))
            elif is_bool and true:
                flags.update([dashed("no_" + name), dashed("disable_" + name)])
            elif is_bool and optional:
                # None is not False: argument_utils.py makes it store_false (`--no-*`).
                flags.update([dashed("no_" + name), dashed("disable_" + name)])
            else:
                flags.add(dashed(name))

for path in ["megatron/training/arguments.py"] + [p for p in py_files if "/" not in p]:
    for node in ast.walk(ast.parse(source(path))):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    flags.add(arg.value)

print(f"# Megatron-LM {commit}: every flag its argparse defines (scripts/megatron_flags.py)")
for flag in sorted(flags):
    print(flag[2:])
