#!/bin/sh
# Launcher of the Claude Code plugin (hooks/hooks.json, .claude-plugin/plugin.json): runs
# ai_smartness.py from the plugin's folder with the shared venv's python, as install.sh's hooks
# do, or with the system python3 (stdlib path, lexical memory) until that venv exists. The
# first session start without it builds it in the background with `install.sh --deps-only`
# (once: its log, plugin-deps.log, marks the attempt; AI_SMARTNESS_NO_EMBEDDINGS=1 skips it).
# Hooks fail open: whatever goes wrong here exits 0 without output.
root=$(cd "$(dirname "$0")/.." && pwd -P) || exit 0
home=${AI_SMARTNESS_HOME:-$HOME/.local/share/ai_smartness}
py=$home/venv/bin/python
if [ ! -x "$py" ]; then
  py=$(command -v python3) || exit 0
  if [ "$*" = "hook start" ] && [ "${AI_SMARTNESS_NO_EMBEDDINGS:-}" != 1 ] && [ ! -e "$home/plugin-deps.log" ] &&
    mkdir -p "$home" 2>/dev/null; then
    # Detached, its output in the log: the hook answers now, the next sessions get the model.
    (AI_SMARTNESS_HOME=$home nohup bash "$root/install.sh" --deps-only </dev/null >"$home/plugin-deps.log" 2>&1 &)
  fi
fi
# -I: no user paths (a project's json.py shadows nothing). Hooks also skip site (-S), as the
# installed ones do; the MCP server keeps it: it may embed in-process with the venv's model.
load='import sys; sys.path.insert(0, sys.argv[1]); import ai_smartness'
if [ "${1:-}" = hook ]; then
  exec "$py" -I -S -c "$load; ai_smartness.hook_command(sys.argv[2:])" "$root" "$@"
fi
exec "$py" -I -c "$load; sys.exit(ai_smartness.main(sys.argv[2:]))" "$root" "$@"
