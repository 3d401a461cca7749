#!/usr/bin/env bash
# The one test command: `bash tests/run.sh [pytest args...]`, from anywhere.
# Works on a fresh machine with python3, node and npm: it builds what the tests need
# (the shared venv with the embedding stack plus pytest, and the real Claude Code CLI
# in tests/.cache/npm), then runs pytest with the venv's python from the repo root.
#
# Exit status: pytest's own. Exit 5 (no tests collected) stays a failure, since the suite
# is never empty, except when -k, -m or --deselect narrowed the run: then it means "the
# selection matched nothing", and becomes 0 with a line saying so.
set -euo pipefail

say()  { printf 'tests/run.sh: %s\n' "$*"; }
warn() { printf 'tests/run.sh: warning: %s\n' "$*" >&2; }
err()  { printf 'tests/run.sh: error: %s\n' "$*" >&2; exit 1; }

CLAUDE_VERSION=2.1.197
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"

export AI_SMARTNESS_HOME=${AI_SMARTNESS_HOME:-$HOME/.local/share/ai_smartness}
VENV=$AI_SMARTNESS_HOME/venv
bash ./install.sh --deps-only
"$VENV/bin/python" -c 'import pytest' 2>/dev/null || "$VENV/bin/python" -m pip install -q pytest \
  || err "cannot install pytest into $VENV"
# The installer test lints the Python inside install.sh with ruff when it is there.
"$VENV/bin/python" -m ruff --version >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q ruff \
  || warn "could not install ruff into $VENV; install.sh's Python will only be compiled"

# The MCP server's tests drive it with the official MCP Python SDK's client (a test dependency only).
"$VENV/bin/python" -c 'import mcp' 2>/dev/null || "$VENV/bin/python" -m pip install -q mcp \
  || warn "could not install the MCP Python SDK (mcp) into $VENV; its client tests will be skipped"

# The installer tests run shellcheck when it is there.
if ! command -v shellcheck >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing shellcheck"
  { apt-get update -qq && apt-get install -y -qq shellcheck; } >/dev/null 2>&1 \
    || warn "could not install shellcheck; its test will be skipped"
fi

NPM_DIR=$ROOT/tests/.cache/npm
CLAUDE=$NPM_DIR/node_modules/.bin/claude
# --version in a throwaway HOME with no network: it must not touch ~/.claude or phone home.
claude_ok() {
  local home rc=0
  home=$(mktemp -d)
  HOME=$home DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
    "$CLAUDE" --version >/dev/null 2>&1 || rc=$?
  rm -rf "$home"
  return "$rc"
}
if ! claude_ok; then
  command -v npm >/dev/null || err "npm is required to install Claude Code for the end-to-end tests"
  say "installing @anthropic-ai/claude-code@$CLAUDE_VERSION into tests/.cache/npm"
  # npm may warn that install scripts are not allowed; the binary works without them.
  npm install --prefix "$NPM_DIR" --no-audit --no-fund "@anthropic-ai/claude-code@$CLAUDE_VERSION" >/dev/null \
    || err "npm install of @anthropic-ai/claude-code@$CLAUDE_VERSION failed"
  claude_ok || err "$CLAUDE --version does not run"
fi
export AI_SMARTNESS_CLAUDE_BIN=$CLAUDE
# Codex CLI and Gemini CLI for tests/test_agents.py: pinned, in their own prefix beside Claude
# Code's (an npm install there never touches it).
CODEX_VERSION=0.169.0 GEMINI_VERSION=0.61.0
AGENTS_NPM=$NPM_DIR/agents
agents_ok() {
  local home rc=0
  home=$(mktemp -d)
  [ "$(HOME=$home "$AGENTS_NPM/node_modules/.bin/codex" --version 2>/dev/null)" = "codex-cli $CODEX_VERSION" ] || rc=1
  [ "$(HOME=$home "$AGENTS_NPM/node_modules/.bin/gemini" --version 2>/dev/null)" = "$GEMINI_VERSION" ] || rc=1
  rm -rf "$home"
  return "$rc"
}
if ! agents_ok; then
  say "installing @openai/codex@$CODEX_VERSION and @google/gemini-cli@$GEMINI_VERSION into tests/.cache/npm/agents"
  mkdir -p "$AGENTS_NPM"
  npm install --prefix "$AGENTS_NPM" --no-audit --no-fund --save-exact \
    "@openai/codex@$CODEX_VERSION" "@google/gemini-cli@$GEMINI_VERSION" >/dev/null \
    || warn "npm install of Codex CLI or Gemini CLI failed; their end-to-end tests will skip"
fi
export AI_SMARTNESS_CODEX_BIN=$AGENTS_NPM/node_modules/.bin/codex AI_SMARTNESS_GEMINI_BIN=$AGENTS_NPM/node_modules/.bin/gemini
# The embedding model ships inside a pip package: nothing may reach for the Hugging Face hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

rc=0
"$VENV/bin/python" -m pytest tests "$@" || rc=$?
if [ "$rc" = 5 ]; then
  for arg in "$@"; do
    case $arg in
      -k*|-m*|--keyword*|--deselect*) say "no test matched the selection ($*): nothing ran"; exit 0 ;;
    esac
  done
  printf 'tests/run.sh: error: pytest collected no tests: the suite is missing or broken\n' >&2
fi
exit "$rc"
