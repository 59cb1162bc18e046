#!/usr/bin/env python3
"""Lists the command-line flags that earlier Megatron-LM releases and Megatron-DeepSpeed define but
the commit of src/emit/megatron_flags.txt does not: every `add_argument('--...')` name of
megatron/arguments.py or megatron/training/arguments.py and of the top-level pretrain_*.py scripts
at each release tag given, and at Megatron-DeepSpeed's commit. A launch line written for one of
those versions uses them (2021's --DDP-impl, --checkpoint-activations; Megatron-DeepSpeed's
--zero-stage), so tpsim skips them as flags that exist rather than refusing them as misspellings.

Usage (from the repository root; the tags and commit of the committed list are in its first line):
  scripts/megatron_flags_older.py MEGATRON_GIT_DIR DEEPSPEED_GIT_DIR DS_COMMIT TAG... \
         > src/emit/megatron_flags_older.txt
(the flags of src/emit/megatron_flags.txt are left out)
"""
import ast
import pathlib
import subprocess
import sys

megatron_dir, deepspeed_dir, ds_commit, *tags = sys.argv[1:]
current = {l for l in pathlib.Path("src/emit/megatron_flags.txt").read_text().splitlines()
           if not l.startswith("#")}


def git(git_dir, *args):
    return subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)


def flags_at(git_dir, commit):
    files = git(git_dir, "ls-tree", "-r", "--name-only", commit).stdout.splitlines()
    paths = [p for p in files if p in ("megatron/arguments.py", "megatron/training/arguments.py")
             or ("/" not in p and p.endswith(".py"))]
    out = set()
    for path in paths:
        text = git(git_dir, "show", f"{commit}:{path}").stdout
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument"):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                            and arg.value.startswith("--"):
                        out.add(arg.value[2:])
    return out


older = set()
for tag in tags:
    older |= flags_at(megatron_dir, tag)
older |= flags_at(deepspeed_dir, ds_commit)
print(f"# Megatron-LM {' '.join(tags)} and Megatron-DeepSpeed {ds_commit}: flags they define that "
      f"src/emit/megatron_flags.txt lacks (scripts/megatron_flags_older.py)")
for flag in sorted(older - current):
    print(flag)
