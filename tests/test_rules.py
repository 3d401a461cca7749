"""User rules: which sentences of a prompt are rules (en / fr / es), what a rule is about, a
newer rule replacing an older one on the same subject, the rules line injected with a prompt,
replaced instructions marked in recalled messages, `rules list` / `rules remove`, and rule
capture on MemoryCode dialogues when ../shared holds them. The labelled and sentence-start
forms are in test_text.py."""
import json
import sys

import pytest

import ai_smartness as ai
from conftest import cli, cli_json
from support import shared_path

DAY = 86400.0


# ---- detection ----

@pytest.mark.parametrize("text,rule", [
    ("Going forward, please use pytest for all new tests.", "Use pytest for all new tests"),
    ("From now on, start variable names with 'x_'.", "Start variable names with 'x_'"),
    ("Also, I want you to always add type hints to public functions.", "Always add type hints to public functions"),
    ("Make sure that all your method names end with '_m', so we can spot them.", "All method names end with '_m'"),
    ("Oliver, when naming attributes, remember to always start the name with 'i_' as in 'i_count'.",
     "When naming attributes, always start the name with 'i_'"),
    ("One of our conventions is to always import the 'bz2' module.", "Always import the 'bz2' module"),
    ("I'd like you to start using the '@timer' decorator from the 'pedantic' module for all methods.",
     "Use the '@timer' decorator from the 'pedantic' module for all methods"),
    ("I want to emphasize the importance of including assert statements in your functions.",
     "Include assert statements in functions"),
    ("Never push to main directly!", "Never push to main directly"),
    ("Never change any migration file.", "Never change any migration file"),
    ("git push failed again.\nFrom now on, always rebase before pushing.", "Always rebase before pushing"),
    ("From now on, don't write any code yet before I approve the plan.",
     "Don't write any code yet before I approve the plan"),
    ("Remove all print statements before committing.", "Remove all print statements before committing"),
    ("Run the linter on every file you touch.", "Run the linter on every file you touch"),
    ("Quick update: going forward, start variable names with 'vr_' instead.", "Start variable names with 'vr_'"),
    ("Include a single digit in your method names from now on.", "Include a single digit in method names"),
    ("À partir de maintenant, utilise le préfixe 'x_' pour les noms de variables.",
     "Utilise le préfixe 'x_' pour les noms de variables"),
    ("Désormais, n'oublie pas de documenter toutes les fonctions.",
     "N'oublie pas de documenter toutes les fonctions"),
    ("Assure-toi de toujours lancer les tests avant chaque commit.",
     "Assure-toi de toujours lancer les tests avant chaque commit"),
    ("De ahora en adelante, usa el prefijo 'v_' en los nombres de variables.",
     "Usa el prefijo 'v_' en los nombres de variables"),
    ("Asegúrate de siempre escribir pruebas para cada función.", "Asegúrate de siempre escribir pruebas para cada función"),
    ("No olvides ejecutar las pruebas antes de cada commit.", "No olvides ejecutar las pruebas antes de cada commit"),
    # "always" between "I want you to" and its verb; a verb the pointer words hold; ever; answers
    ("From now on, I want you to always run the linter before committing.",
     "Always run the linter before committing"),
    ("I'd like you to always ask before deleting files.", "Always ask before deleting files"),
    ("Remember to update the CHANGELOG whenever you release.", "Update the CHANGELOG whenever you release"),
    ("Don't ever add console.log statements to production code.",
     "Don't ever add console.log statements to production code"),
    ("From now on, keep your answers short.", "Keep answers short"),
    ("From now on, respond in French.", "Respond in French"),
    ("A partir de ahora, nunca hagas push directo a main.", "Nunca hagas push directo a main"),
    # every time says how long; a modal, a preference, a default; the adverb after a French or
    # Spanish verb; "tu dois", "il faut", "tienes que"; a subjunctive after "que"
    ("Every time you add a dependency, pin its version.", "Every time you add a dependency, pin its version"),
    ("Stop using var, use const or let from now on.", "Stop using var, use const or let"),
    ("Prefer named exports over default exports going forward.", "Prefer named exports over default exports"),
    ("You must never hardcode API keys.", "Never hardcode API keys"),
    ("From now on, all new files should be TypeScript.", "All new files should be TypeScript"),
    ("Default to functional components, not class components.",
     "Default to functional components, not class components"),
    ("From now on, don't touch the legacy folder.", "Don't touch the legacy folder"),
    ("I prefer that you use f-strings for formatting.", "I prefer that you use f-strings for formatting"),
    ("Please always use pnpm in this project.", "Always use pnpm in this project"),
    ("Désormais, écris les messages de commit en anglais.", "Écris les messages de commit en anglais"),
    ("À l'avenir, ajoute toujours un test pour chaque correction.", "Ajoute toujours un test pour chaque correction"),
    ("Je veux que tu utilises toujours des f-strings.", "Je veux que tu utilises toujours des f-strings"),
    ("Il faut toujours lancer black avant de committer.", "Toujours lancer black avant de committer"),
    ("Tu dois toujours documenter les fonctions publiques.", "Toujours documenter les fonctions publiques"),
    ("Merci de toujours utiliser pnpm dans ce projet.", "Toujours utiliser pnpm dans ce projet"),
    ("Ne modifie jamais les fichiers de migration.", "Ne modifie jamais les fichiers de migration"),
    ("Quiero que siempre escribas pruebas para las funciones nuevas.",
     "Quiero que siempre escribas pruebas para las funciones nuevas"),
    ("Por favor, usa siempre pnpm en este proyecto.", "Usa siempre pnpm en este proyecto"),
    ("Tienes que ejecutar los tests antes de cada commit.", "Ejecutar los tests antes de cada commit"),
    # A team's convention, and a request to stop doing something.
    ("We always squash merge PRs.", "We always squash merge PRs"),
    ("We never commit directly to main.", "We never commit directly to main"),
    ("We always start method names with 'n_'.", "We always start method names with 'n_'"),
    ("Stop using var in JavaScript files.", "Stop using var in JavaScript files"),
    ("Arrête d'ajouter des commentaires partout.", "Arrête d'ajouter des commentaires partout"),
    ("Deja de usar console.log en el código.", "Deja de usar console.log en el código"),
    # A condition before "always" needs no comma.
    ("When we deploy we always run the migrations first.", "When we deploy we always run the migrations first"),
    ("Before committing always run the linter.", "Before committing always run the linter"),
])
def test_natural_rules_are_detected_in_their_directive_sentence(text, rule):
    assert ai.detect_rules("Thanks for the review yesterday. " + text + " Let me know if anything is unclear.") == [rule]


@pytest.mark.parametrize("text", [
    "Always happy to help!", "I'm always glad to pair on the code with you.", "Fix the failing test in auth.py.",
    "Rename 'foo' to 'bar' in utils.py.", "Should we always use tabs?", "I always forget the flags.",
    "We never deployed on a Friday.", "Make sure your code is clean and readable.",
    "It's important that our code is consistent across the team.",
    "Start following a specific naming convention for your variable names.",
    "Now, for all Python functions that you define, I want you to always remember two key points.",
    "Let's start with our COVID-19 response plan, as it's an immediate concern for all of us.",
    "Siempre pones los tests en la carpeta equivocada.",
    "We always push on Fridays and it breaks everything.", "We never use that library anyway, so remove the import.",
    "I always run the tests twice.", "Stop the server.", "Deja el archivo como está.",
    "Stop guessing and read the file.", "Quit apologizing, just fix it.",
    "When I was a kid we always played outside.", "If the build fails we always push a fix and it breaks again.",
    # A rule pointed at, not stated: the next sentence says it.
    "Always follow a specific naming convention.", "For function names, we always start them with a specific prefix.",
    # What a session reports or asks, with the words of a rule in it.
    "The build always fails on CI with a timeout.", "Every time I run the tests, the auth test fails.",
    "You must have broken the login page, it doesn't render.", "The tests should pass now, can you check?",
    "All new files should be reviewed before the release on Friday.", "I prefer the second option you gave.",
    "Whenever I push, the pipeline takes 20 minutes.", "It should use the cache but it always hits the database.",
    "Je veux que tu corriges le bug dans auth.py.", "Tienes que arreglar el error en la función de login.",
    "Ne modifie pas encore le code, explique d'abord.", "Going forward with the refactor, what's the first step?",
    "Don't ever do that again, you deleted my files!",
    "Toujours ravi de t'aider !", "Siempre feliz de ayudar.", "Je suis toujours content de ce code.",
    "Keep in mind that the weather is nice.", "Remember that efficiency is key in software engineering.",
    "Write the parser for the invoice files.", "Use the new API in auth.py.",
    # Directions for the turn at hand: held as rules, they would stop the agent writing code later.
    "Don't change any code, just diagnose and respond in chat.", "Do not write any code yet or modify any files.",
    "N'écris pas encore de code pour le moment.", "No escribas ningún código todavía.",
    # A task on "all" of its object is one job; a pasted build warning is no direction.
    "Merge all changes back to the branch release_1.", "Push all branches to origin.",
    "Run script build phase '[CP-User] Check deps' will be run during every build because 'Based on analysis' is off.",
    # The words of a quoted text are the value a task names, no sign of a convention.
    'Also remove the text "Confirm this shows your chess board" and condense the move widget.',
    # A constraint on the task it comes with ("make it responsive").
    "Do not change any style or function of the app.",
    # What a command printed, pasted after it: its advice is the tool's, not the user's.
    "npx expo-doctor\n\nnpm warn Unknown user config\nAdvice:\nUse 'npx expo install --check' to review and upgrade "
    "your dependencies.",
    "dana@mac app % npm install\nnpm notice: Always run npm audit before publishing.",
])
def test_tasks_small_talk_habits_and_vague_advice_are_not_rules(text):
    assert ai.detect_rules(text) == []


def test_coordinated_rules_split_into_one_rule_each():
    assert ai.detect_rules("Always start attribute names with 'q_' and method names with 'o_'.") == [
        "Always start attribute names with 'q_'", "Always start method names with 'o_'"]


def test_a_rule_that_says_them_keeps_what_them_names():
    assert ai.detect_rules("Let's talk about attribute names. Always start them with 'at_'.") == [
        "Always start attribute names with 'at_'"]
    # The second half of a coordinated rule is on the first half's object, said or not.
    assert ai.detect_rules("Going forward, I'd like you to start method names with 'o_' and end them with '_ud'.") == [
        "Start method names with 'o_'", "End method names with '_ud'"]
    assert ai.detect_rules("I want you to start function argument names with 'a_' and always end them with '_h'.") == [
        "Start function argument names with 'a_'", "Always end function argument names with '_h'"]
    assert ai.detect_rules("Please ensure that all your variable names start with 'z_' and end with '_vr'.") == [
        "All variable names start with 'z_'", "End variable names with '_vr'"]
    # Grouped under their object, so a later rule on it replaces them.
    assert [ai.rule_phrase({"text": t}) for t in ai.detect_rules("Start variable names with 'v_', and end them "
                                                                  "with '_q'.")] == [
        ("Variables", "names start with 'v_'"), ("Variables", "names end with '_q'")]
    rules = []
    ai.merge_rules(rules, ai.detect_rules("Start method names with 'o_' and end them with '_ud'."), 1000.0)
    ai.merge_rules(rules, ["End method names with '_md'"], 2000.0)
    assert [r["text"] for r in ai.current_rules(rules)] == ["Start method names with 'o_'", "End method names with '_md'"]


# ---- subject and supersession ----

@pytest.mark.parametrize("old,new", [
    ("Always start variable names with 'x_'", "Start variable names with 'vr_' from now on"),
    ("When naming variables, always start with 'n_'", "Ensure that all variable names start with 'wr_'"),
    ("End all method names with '_md'", "For method names, end them with '_o' instead"),
    ("Always use CamelCase for class names", "Use all uppercase letters for class names"),
    ("Use 'pytest' for the tests", "Use 'unittest' instead of 'pytest' for the tests"),
    ("Always add docstrings to your methods", "Never add docstrings to your methods"),
    ("Utilise le préfixe 'x_' pour les noms de variables", "Utilise le préfixe 'y_' pour les noms de variables"),
    ("Usa el prefijo 'v_' en los nombres de variables", "Usa el prefijo 'w_' en los nombres de variables"),
    # Natural rules: the word "instead of" names, another number, another of one kind of choice.
    ("Always use pnpm in this project", "Use yarn instead of pnpm"),
    ("Always use black for formatting", "Use ruff for formatting instead of black"),
    ("Use 2 spaces for indentation in all files", "Use 4 spaces for indentation"),
    ("Keep functions under 50 lines", "Keep functions under 30 lines"),
    ("Respond in French", "Respond in English"),
    ("Use Jest for tests", "Use Vitest for tests"),
    ("Always use pnpm in this project", "Never use pnpm in this project"),
    ("Utilise toujours npm", "Utilise toujours pnpm"),
])
def test_a_rule_on_the_same_subject_replaces_the_older_one(old, new):
    rules = []
    ai.merge_rules(rules, [old], 1000.0)
    assert ai.merge_rules(rules, [new], 2000.0, source="m2")
    assert [r["text"] for r in ai.current_rules(rules)] == [new]
    assert rules[0]["replaced_by"] == new and rules[0]["replaced_at"] == ai.iso(2000.0)
    assert rules[1]["message_id"] == "m2"


@pytest.mark.parametrize("one,other", [
    ("Always start variable names with 'x_'", "Always end variable names with '_y'"),  # prefix vs suffix
    ("Always start variable names with 'x_'", "Always start method names with 'm_'"),  # other object
    ("Add the '@timer' decorator to all functions", "Add the '@count_calls' decorator to all functions"),
    ("Always import the 'bz2' module", "Always import the 'gzip' module"),
    ("Always use docstrings in your methods", "Always use type hints in your methods"),
    ("Never push to main directly", "Always run the linter before committing"),
    ("Always add type hints to public functions", "Always add docstrings to public functions"),
    ("Always run pytest before you push", "Always run mypy before you push"),
    ("Always run pytest before you push", "Always run black before you push"),  # two kinds of tools
    ("Use 2 spaces for indentation", "Limit lines to 100 characters"),
])
def test_different_aspects_values_that_add_up_and_other_rules_both_stay(one, other):
    rules = []
    ai.merge_rules(rules, [one], 1000.0)
    ai.merge_rules(rules, [other], 2000.0)
    assert [r["text"] for r in ai.current_rules(rules)] == [one, other]


def test_a_restated_rule_is_not_stored_twice():
    rules = []
    ai.merge_rules(rules, ["Always start variable names with 'x_'"], 1000.0)
    assert ai.merge_rules(rules, ["From now on, variable names start with 'x_'", "always start variable names with 'x_'!"],
                          2000.0) == []
    assert len(rules) == 1


def test_a_rule_drained_after_a_newer_one_is_stored_already_replaced():
    rules = []
    ai.merge_rules(rules, ["Always start variable names with 'vr_'"], 2000.0)
    ai.merge_rules(rules, ["Always start variable names with 'x_'"], 1000.0)
    assert [r["text"] for r in ai.current_rules(rules)] == ["Always start variable names with 'vr_'"]


def test_old_records_without_subject_or_message_still_load_and_merge(project):
    store = ai.open_memory(str(project)).store
    store.save_rules([{"text": "Always start variable names with 'x_'", "created_at": "2024-01-01T00:00:00Z"},
                      {"text": "planted without a date"}])
    ai.add_rules_to_store(store, ["Start variable names with 'vr_'"], 2e9)
    assert [r["text"] for r in ai.current_rules(store.rules())] == ["planted without a date",
                                                                     "Start variable names with 'vr_'"]


# ---- the rules line ----

def rules_of(*texts):
    rules = []
    for i, text in enumerate(texts):
        ai.merge_rules(rules, [text], 1000.0 + i * DAY)
    return rules


def test_rules_line_holds_current_rules_most_relevant_first_then_newest():
    rules = rules_of("Always start variable names with 'x_'", "Always add docstrings to your methods",
                     "Never push to main directly", "Start variable names with 'vr_'")
    line = ai.render_rules(rules, ai.terms("write a method that parses dates"), 1000, "en")
    assert line == "User rules: Methods: docstrings. Variables: names start with 'vr_'. Never push to main directly."
    line = ai.render_rules(rules, ai.terms("push the branch"), 1000, "en")
    assert line == "User rules: Never push to main directly. Variables: names start with 'vr_'. Methods: docstrings."


def test_rules_on_one_object_are_grouped_under_it_in_a_few_words():
    rules = rules_of("Always end function names with '_f'", "Always add the '@timer' decorator from the 'pedantic' module "
                     "to all your functions", "Use CamelCase for class names", "Include a single digit in function names",
                     "Run the linter before every commit, please")
    assert ai.render_rules(rules, [], 1000, "en") == (
        "User rules: Run the linter before every commit, please. Functions: a digit in names, the '@timer' decorator "
        "from 'pedantic', names end with '_f'. Classes: CamelCase names.")


def test_rules_line_never_cuts_a_rule_and_says_how_many_did_not_fit():
    rules = rules_of("Always push with --force-with-lease, never with a bare --force",
                     "Never commit generated files under build/ to the repository",
                     "Always run the full test suite before asking for a review")
    line = ai.render_rules(rules, [], 172, "en")
    assert line == ("User rules: Always run the full test suite before asking for a review. Never commit generated "
                    "files under build/ to the repository. (+1 more: ai_smartness rules list)")
    assert ai.render_rules(rules, [], 20, "en") == ""


def test_rules_take_only_the_room_they_need_and_at_most_their_share(project):
    mem = ai.open_memory(str(project))
    for i in range(30):
        mem.capture(f"The parser module {i} reads invoice files with a streaming reader and retries", source="prompt")
    mem.add_rules(["Always add docstrings to your methods"], mem.clock())
    short = mem.context("how does the parser read invoice files?", budget=2000)["text"]
    assert "\nUser rules: Methods: docstrings.\n" in short
    assert len(short) > 1500  # the rest of the budget went to the recalled notes
    mem.add_rules([f"Always start {k} names with 'p{k[:2]}_' in module number {i}" for i in range(12)
                   for k in ("method",)], mem.clock())
    line = [x for x in mem.context("parser", budget=2000)["text"].splitlines() if x.startswith("User rules:")][0]
    assert len(line) <= 2000 * ai.RULES_SHARE


# ---- replaced instructions in recalled messages ----

def test_a_recalled_sentence_stating_a_replaced_rule_is_marked_with_the_current_one():
    rules = rules_of("Always start variable names with 'x_'", "Start variable names with 'vr_' from now on")
    text = ("Welcome aboard. One of our conventions is to always start variable names with 'x_'. "
            "Also keep functions short.")
    marked = ai.mark_replaced(text, ai.stale_rules(rules), "en")
    date = ai.format_date(1000.0 + DAY)
    assert marked == ("Welcome aboard. [replaced on " + date + " by: Start variable names with 'vr_' from now on] "
                      "One of our conventions is to always start variable names with 'x_'. Also keep functions short.")
    assert ai.mark_replaced("I now start variable names with 'vr_', not 'x_'.", ai.stale_rules(rules), "en") == \
        "I now start variable names with 'vr_', not 'x_'."
    assert ai.mark_replaced("Method names start with 'x_'.", ai.stale_rules(rules), "en") == "Method names start with 'x_'."


def test_an_older_statement_of_another_value_is_marked_even_if_it_never_was_a_rule():
    rules = rules_of("Always end function argument names with '_e'")  # stated at 1000
    stale = ai.stale_rules(rules)
    said = "Got it. I'll end function argument names with '_f' from now on."
    assert ai.mark_replaced(said, stale, "en", ts=500.0) == (
        "Got it. [replaced on " + ai.format_date(1000.0) + " by: Always end function argument names with '_e'] "
        "I'll end function argument names with '_f' from now on.")
    assert ai.mark_replaced(said, stale, "en", ts=5000.0) == said  # said after the rule: not an old version
    assert ai.mark_replaced("I'll end variable names with '_f'.", stale, "en", ts=500.0) == \
        "I'll end variable names with '_f'."


def test_a_sentence_stating_two_replaced_rules_is_marked_with_both_current_ones():
    rules = rules_of("End variable names with '_y'", "End method names with '_a'", "End method names with '_o'",
                     "End variable names with '_w'")
    said = "For consistency, I'd like you to end variable names with '_y' and method names with '_a'."
    marked = ai.mark_replaced(said, ai.stale_rules(rules), "en", ts=500.0)
    assert marked == ("[replaced on " + ai.format_date(1000.0 + 2 * DAY) + " by: End method names with '_o'] "
                      "[replaced on " + ai.format_date(1000.0 + 3 * DAY) + " by: End variable names with '_w'] " + said)
    # The half that still holds is no reason for a mark of its own.
    said = "End variable names with '_w' and method names with '_a'."
    assert ai.mark_replaced(said, ai.stale_rules(rules), "en", ts=500.0) == (
        "[replaced on " + ai.format_date(1000.0 + 2 * DAY) + " by: End method names with '_o'] " + said)


def test_a_chain_of_replacements_points_at_the_current_rule():
    rules = rules_of("Always start variable names with 'x_'", "Always start variable names with 'm_'",
                     "Always start variable names with 'vr_'")
    marked = ai.mark_replaced("Start variable names with 'x_'.", ai.stale_rules(rules), "fr")
    assert marked.startswith("[remplacée le ") and "par : Always start variable names with 'vr_']" in marked


def test_context_marks_a_replaced_instruction_and_injects_only_the_current_rule(project):
    mem = ai.open_memory(str(project))
    mem.capture("Welcome! From now on, always start variable names with 'x_' in the billing code.", source="prompt",
                at="2024-03-04T09:00:00Z")
    mem.capture("Update on the billing code: start variable names with 'vr_' from now on.", source="prompt",
                at="2024-03-11T09:00:00Z")
    text = mem.context("billing code variable names")["text"]
    rules_line = [x for x in text.splitlines() if x.startswith("User rules:")]
    assert rules_line == ["User rules: Variables: names start with 'vr_'."]
    recalled = [x for x in text.splitlines() if "'x_'" in x]
    mark = f"[replaced on {ai.format_date(ai.parse_time('2024-03-11T09:00:00Z'))} by: Update on the billing code"
    assert recalled and all(mark in x for x in recalled), text


def test_a_natural_rule_replaced_is_marked_where_it_is_recalled_and_left_out_of_the_rules_line(project):
    mem = ai.open_memory(str(project))
    mem.capture("For the parser tests: use Jest for tests from now on.", source="prompt", at="2024-03-04T09:00:00Z")
    mem.capture("Going forward, use Vitest for tests.", source="prompt", at="2024-03-11T09:00:00Z")
    text = mem.context("write the parser tests")["text"]
    assert [x for x in text.splitlines() if x.startswith("User rules:")] == ["User rules: Use Vitest for tests."]
    recalled = [x for x in text.splitlines() if "Jest" in x and x.startswith("  - ")]
    mark = f"[replaced on {ai.format_date(ai.parse_time('2024-03-11T09:00:00Z'))} by: Use Vitest for tests]"
    assert recalled and all(mark in x for x in recalled), text
    # The thread the old rule started is named by it: its title says it was replaced too.
    titles = [x for x in text.splitlines() if "Jest" in x and not x.startswith("  - ")]
    assert titles and all(x.startswith("# [replaced rule] ") for x in titles), text
    # A recall, and the view of the thread, mark it the same way.
    for view in (mem.recall("Jest parser tests"), mem.thread_view(next(iter(mem.threads)))):
        said = [x for x in view.splitlines() if "Jest" in x and "Jest parser tests" not in x]  # not the query
        assert said and all(mark in x or x.startswith('Thread "[replaced rule] ') for x in said), view
    # So do the texts of `search` and `threads` (the CLI's, which the MCP tools answer with).
    found = cli("search", "Jest parser tests", project=project).stdout.splitlines()
    said = [x for x in found if "Jest" in x.split(" :: ", 1)[1]]
    assert said and all(x.split("] ", 1)[1].startswith("[replaced rule] ") and mark in x for x in said), found
    listed = cli("threads", "--status", "all", project=project).stdout
    assert "[replaced rule] For the parser tests" in listed, listed
    assert not any("[replaced" in r["title"] for r in cli_json("threads", project=project))  # the data as stored


def test_a_briefing_does_not_name_the_work_by_a_replaced_rule_as_if_it_held():
    stale = ai.stale_rules(rules_of("Use Jest for tests", "Use Vitest for tests"))
    now = 1000.0 + 3 * DAY
    hot = {"id": "t1", "title": "Use Jest for tests from now on", "last_active": ai.iso(now - 60), "messages": []}
    other = {"id": "t2", "title": "Please use Jest for tests going forward", "last_active": ai.iso(now - 90)}
    for lang, mark in (("en", "[replaced rule] "), ("fr", "[règle remplacée] "), ("es", "[regla reemplazada] ")):
        lines = ai.where_work_stopped(hot, {"t2": other}, [], {}, now, lang, 400, stale)
        assert f"{mark}Use Jest for tests from now on" in lines[0], lines
        assert any(x.startswith(f"- {mark}Please use Jest for tests") for x in lines), lines
    # Without a newer rule on it, the same title is shown as it is.
    lines = ai.where_work_stopped(hot, {"t2": other}, [], {}, now, "en", 400, ai.stale_rules(rules_of(
        "Use Jest for tests")))
    assert '"Use Jest for tests from now on"' in lines[0] and "replaced" not in "\n".join(lines), lines


# ---- CLI ----

def test_rules_list_shows_current_rules_then_replaced_ones_and_remove_follows_that_order(project):
    assert cli("rules", "add", "Always start variable names with 'x_'", project=project).returncode == 0
    assert cli("rules", "add", "Never push to main directly", project=project).returncode == 0
    assert cli("rules", "add", "Always start variable names with 'vr_'", project=project).returncode == 0
    listed = cli("rules", project=project).stdout.splitlines()
    assert listed[:2] == ["1. Never push to main directly", "2. Always start variable names with 'vr_'"]
    assert listed[2].startswith("3. Always start variable names with 'x_' [replaced on ")
    assert listed[2].endswith(" by: Always start variable names with 'vr_']")
    as_json = cli_json("rules", project=project)
    assert [bool(r.get("replaced_by")) for r in as_json] == [False, False, True]
    assert cli("rules", "remove", "3", project=project).returncode == 0
    assert [r["text"] for r in cli_json("rules", project=project)] == [
        "Never push to main directly", "Always start variable names with 'vr_'"]
    assert cli_json("status", project=project)["rules"] == 2


# ---- MemoryCode (../shared): rule capture on a few dialogues ----

def test_memorycode_instructions_in_force_end_up_as_current_rules():
    bench = shared_path("bench", "memorycode")
    sys.path.insert(0, str(bench))
    try:
        import mc_lib
    finally:
        sys.path.remove(str(bench))
    dialogues = json.loads((bench / "memorycode_dev.json").read_text())["dialogues"]
    stored = coding = in_force = kept = 0
    for did in sorted(dialogues, key=mc_lib.id_number)[::9]:
        d = dialogues[did]
        versions = mc_lib.instruction_versions(d)
        rules = []
        for turn in mc_lib.replay_plan(did, d):
            if turn["source"] == "prompt":
                ai.merge_rules(rules, ai.detect_rules(turn["text"]), ai.parse_time(turn["at"]))
        score = mc_lib.score_rules(ai.current_rules(rules), versions)
        in_force += len(score["force"])
        kept += sum(f["stored"] for f in score["force"])
        stored += len(rules)
        coding += mc_lib.score_rules(rules, versions)["n_rules_coding"]
    assert in_force > 20 and kept / in_force >= 0.8, (kept, in_force)
    assert stored and coding / stored >= 0.85, (coding, stored)
