"""Labelled note streams for thread decisions: what a new user jots down while working on a few
things at once, each note tagged with the topic it belongs to. Unlike topics_data.py, the topic
word is not in every note: notes say what was done, asked or found, in varied words.

purity(threads, owner) and fragmentation(threads, owner) are the measures (bench/threads.py
prints them for every stream and embedder; tests/test_threads.py asserts them)."""
import collections
import random

# A new user's notes on three tasks, three phrasings of each.
PG = {
    "terse": [
        "postgres migration: add tenant_id to orders",
        "backfill tenant_id in batches of 10k rows",
        "migration locks the orders table for too long on staging",
        "set lock_timeout and retry the ALTER",
        "create the index concurrently, outside the transaction",
        "down script drops the column again",
        "migration ran on staging, row counts match",
    ],
    "prose": [
        "Today I start the database migration that adds a tenant column to the orders table in Postgres.",
        "The backfill of existing rows has to run in small batches so the replicas keep up.",
        "On staging the ALTER TABLE waited on a lock held by the nightly report query.",
        "I added lock_timeout to the migration and a retry loop around the schema change.",
        "The new index on tenant_id must be built concurrently, so it cannot run inside the transaction.",
        "Wrote the rollback script: it drops the tenant column and the index.",
        "Staging is migrated; counts before and after the schema change are identical.",
    ],
    "questions": [
        "How do I add a NOT NULL tenant_id column to a big Postgres table without downtime?",
        "Should the backfill update the orders rows in batches or in one statement?",
        "Why does ALTER TABLE hang on staging while the reporting job runs?",
        "Is lock_timeout with a retry enough to make the schema migration safe?",
        "Can CREATE INDEX CONCURRENTLY run inside a migration transaction?",
        "What should the down migration do with the data in the dropped column?",
        "The database migration finished on staging: anything left to check before production?",
    ],
}
REACT = {
    "terse": [
        "React login form: email + password fields",
        "show a validation message under the email input",
        "disable the submit button while the request is pending",
        "login form loses focus after a failed attempt",
        "store the session token from the login response in context",
        "remember-me checkbox on the sign-in page",
        "snapshot test for the login component",
    ],
    "prose": [
        "Building the sign-in screen in React: an email field, a password field and a submit button.",
        "Invalid email addresses should show an inline error under the input as the user types.",
        "While the authentication request is in flight, the button is disabled and shows a spinner.",
        "After a wrong password the form clears and the cursor jumps away; keep focus on the password box.",
        "The access token returned by the auth endpoint goes into a React context provider.",
        "Added a 'keep me signed in' checkbox that persists the session in localStorage.",
        "The LoginForm component now has a test with React Testing Library.",
    ],
    "questions": [
        "What is the cleanest way to build a login form in React with hooks?",
        "How do I show a field error under the email input when the address is invalid?",
        "Should the sign-in button be disabled until the fetch resolves?",
        "Why does the password field lose focus when the login fails?",
        "Where should the user's auth token live after a successful sign-in, context or redux?",
        "How does a remember-me option usually keep the user logged in?",
    ],
}
CI = {
    "terse": [
        "CI flaky tests: checkout spec fails one run in five",
        "flaky test depends on the order the specs run in",
        "GitHub Actions job times out waiting for the browser",
        "quarantine the unstable e2e specs behind a tag",
        "retry failed jobs once in the workflow",
        "seed the random generator so the pipeline is reproducible",
    ],
    "prose": [
        "The build pipeline is red again: the checkout test passes locally and fails on the runner.",
        "The intermittent failure only happens when the suite runs in parallel shards.",
        "A GitHub Actions step waits on a headless Chrome that sometimes never starts.",
        "Moved the unreliable end-to-end tests to a separate job that does not block merges.",
        "The workflow now retries a failed job once before reporting it.",
        "Fixed the random seed in the test runner so failures can be reproduced.",
    ],
    "questions": [
        "Why does the checkout test fail on CI but never on my machine?",
        "Could the intermittent failures come from tests sharing state between parallel runs?",
        "How do I stop the GitHub Actions job from timing out while Chrome starts?",
        "Is it acceptable to quarantine flaky end-to-end tests instead of fixing them now?",
        "Should the workflow retry failed jobs automatically?",
        "How can I make a failing test run reproducible with a fixed random seed?",
        "The pipeline has been green for a week: can we remove the retries?",
    ],
}
# A fourth task, for streams of four topics.
DOCKER = [
    "the Docker image is 1.2 GB, way too big",
    "switch the Dockerfile to a multi-stage build",
    "use python:3.12-slim as the base image",
    "add a .dockerignore so node_modules is not copied into the build context",
    "image is now 180 MB; push it to the registry",
]
TASKS = {"postgres": PG, "react": REACT, "ci": CI}
# Streams of other tasks, languages and sizes, written apart from the ones above (no word list
# or threshold was tuned on them): two tasks in English, two in French, four in Spanish.
OTHER = {
    "en-two": {
        "search": [
            "search results ignore typos, look at fuzzy matching in Elasticsearch",
            "the product index has no analyzer for plurals yet",
            "reindexing the catalogue takes forty minutes, too slow for every deploy",
            "added an alias so the app reads the old index while the new one builds",
            "relevance: boost exact title matches above description matches",
            "autocomplete suggestions come from an edge n-gram field now",
            "the query for 'blue shoes' returns socks first; check the boosts",
            "search latency p95 is 80 ms after the mapping change",
            "synonyms file: sneakers, trainers and running shoes mean the same",
            "search works on staging with the new analyzer, ship it Monday",
        ],
        "push": [
            "mobile push notifications do not arrive on Android 14",
            "the FCM token is refreshed but never sent back to our server",
            "iOS asks for notification permission too early, on the first screen",
            "store device tokens per user with the platform and app version",
            "a silent push wakes the app to sync the inbox in the background",
            "notifications arrive twice when the user has two devices logged in",
            "deep link from the notification opens the wrong chat",
            "APNs certificate expires next month, switch to a token key",
            "users can mute notifications per conversation in settings",
            "push delivery rate is 97 percent after the token fix",
        ],
    },
    "fr-two": {
        "facture": [
            "les factures PDF sortent sans le numéro de TVA du client",
            "la numérotation des factures doit rester continue, sans trou",
            "arrondi faux sur le total TTC quand il y a trois lignes à 19,99",
            "ajouter la mention des pénalités de retard en bas de facture",
            "les avoirs doivent référencer la facture qu'ils annulent",
            "export comptable des factures du mois au format CSV",
            "la facture en anglais garde des libellés en français",
            "envoyer la facture par courriel au contact de facturation",
            "les factures de décembre ont la mauvaise date d'échéance",
            "génération des factures validée par la comptable, on livre",
        ],
        "cache": [
            "le cache Redis des sessions expire trop tôt, les gens sont déconnectés",
            "la mémoire de Redis monte à 90 % chaque soir",
            "mettre une durée de vie sur les clés du panier",
            "la page d'accueil est lente quand le cache est vide au démarrage",
            "préchauffer le cache des produits populaires après un déploiement",
            "les clés du cache ne contiennent pas la langue, un client voit l'allemand",
            "invalider le cache d'un produit quand son prix change",
            "passer Redis en mode cluster pour tenir la charge des soldes",
            "le taux de succès du cache est à 62 %, trop bas",
            "après le correctif le cache tient la nuit sans saturer",
        ],
    },
    "es-four": {
        "correo": [
            "los correos de bienvenida llegan a la carpeta de spam",
            "configurar SPF y DKIM para el dominio de envío",
            "la plantilla del correo se ve rota en Outlook",
            "enviar los correos desde una cola para no bloquear el registro",
            "ya llegan a la bandeja de entrada, revisar la tasa de rebote",
        ],
        "mapa": [
            "el mapa de tiendas no carga en Safari",
            "agrupar los marcadores cuando hay muchas tiendas cerca",
            "la geolocalización pide permiso antes de abrir el mapa",
            "calcular la tienda más cercana en el servidor y no en el navegador",
            "el mapa ya funciona en Safari y en móviles antiguos",
        ],
        "pagos": [
            "los pagos con tarjeta fallan cuando el banco pide 3D Secure",
            "el webhook de Stripe llega antes de que exista el pedido",
            "guardar el identificador del pago para poder hacer reembolsos",
            "los reembolsos parciales no actualizan el estado del pedido",
            "probar los pagos con las tarjetas de prueba de Stripe",
        ],
        "traduccion": [
            "faltan traducciones al catalán en la página de perfil",
            "las fechas se muestran en formato americano para usuarios de España",
            "extraer los textos de la interfaz a archivos de traducción",
            "los plurales en ruso necesitan tres formas",
            "revisión de las traducciones terminada por el equipo de Barcelona",
        ],
    },
}

# Held-out streams, written by a later helper without looking at any decision on them, and kept
# out of streams() and the tests' figures: measured (bench/threads.py --held-out) to judge a
# change on notes it was not tuned on, never used to tune. Three tasks in English each.
HELD_OUT = {
    "en-three": {
        "import": [
            "CSV import of customers chokes on semicolon-separated files",
            "detect the delimiter from the first line instead of assuming commas",
            "a 200 MB upload runs out of memory; stream the rows instead of loading the file",
            "rows with a bad email are skipped silently, report them to the user",
            "dates like 03/04/2024 are read as March in one file and April in another",
            "show a progress bar while the import runs in the background job",
            "import of the 50k-row sample file works, errors listed in a downloadable report",
        ],
        "leak": [
            "the Node API's memory climbs to 2 GB over a day and the pod restarts",
            "heap snapshot: thousands of listeners on the event emitter, never removed",
            "each websocket reconnect adds another listener",
            "remove the listener in the socket's close handler",
            "the in-process LRU cache has no size limit either",
            "after the fix memory stays flat at 300 MB for 48 hours",
        ],
        "ratelimit": [
            "public API needs rate limiting per key before the launch",
            "token bucket in Redis, 100 requests a minute per key",
            "return 429 with a Retry-After header when the bucket is empty",
            "the partner integration hits the limit during its nightly sync",
            "higher quota for paid plans, read from the plan table",
            "load test: limiter adds 2 ms per request, acceptable",
            "document the limits and headers on the developer portal",
        ],
    },
    "en-three-b": {
        "django": [
            "upgrade Django from 3.2 to 4.2 this sprint",
            "url() is gone, every urls.py needs path() or re_path()",
            "the admin templates override a block that was renamed",
            "USE_L10N warning on startup, remove it from settings",
            "third-party auth package pins Django below 4, find a fork",
            "tests pass on 4.2 except two that compare timezone-aware datetimes",
            "deployed the upgrade to staging, no errors in Sentry after a day",
        ],
        "darkmode": [
            "add a dark theme toggle to the settings page",
            "colors are hardcoded in forty components; move them to CSS variables",
            "respect prefers-color-scheme on first visit",
            "charts keep a white background in dark mode",
            "save the chosen theme in the user profile so it follows them across devices",
            "contrast of grey text fails accessibility checks on the dark background",
            "designer signed off on the dark palette",
        ],
        "backup": [
            "nightly database backup to S3 has silently failed since Tuesday",
            "the cron job's IAM role lost write access to the bucket",
            "alert when no new dump appears in the bucket for 26 hours",
            "encrypt the dumps with a KMS key before upload",
            "lifecycle rule: move dumps older than 30 days to Glacier",
            "restore drill: yesterday's dump loads into a fresh instance in 12 minutes",
        ],
    },
    # Written by the "concepts" helper before the concept table was measured on anything.
    "en-three-c": {
        "logging": [
            "switch the billing service to structured JSON logs",
            "every log line should carry the request id from the gateway",
            "Loki rejects entries bigger than 256 KB, truncate the payload field",
            "log level is DEBUG in production by mistake, costs a fortune in ingestion",
            "Grafana dashboard for error rate per endpoint",
            "page the on-call when 5xx stay above 2% for ten minutes",
            "alert fired during the incident drill within three minutes",
        ],
        "git": [
            "someone committed a 400 MB dataset to the repo, clones take forever",
            "rewrite history with git filter-repo to drop the file",
            "everyone has to re-clone after the force push, announce it in the channel",
            "move large binaries to Git LFS from now on",
            "pre-commit hook rejecting files over 5 MB",
            "protected main branch: force pushes disabled again after the cleanup",
            "fresh clone is 35 MB now",
        ],
        "video": [
            "user uploads of videos stall at 99% on slow connections",
            "resumable uploads with tus, chunks of 5 MB",
            "transcode to 720p and 1080p with ffmpeg in a worker queue",
            "thumbnails are generated from the first frame, often black",
            "pick the frame at 10% of the duration instead",
            "HLS playlist served from the CDN, players pick the bitrate",
        ],
    },
}


def _round_robin(groups):
    out = []
    for i in range(max(len(v) for v in groups.values())):
        for name, texts in groups.items():
            if i < len(texts):
                out.append((name, texts[i]))
    return out


def _blocks(groups):
    return [(name, text) for name, texts in groups.items() for text in texts]


def _shuffled(groups, seed):
    """Each topic's notes in their order, the topics mixed at random (a fixed seed)."""
    rng = random.Random(seed)
    queues = {name: list(texts) for name, texts in groups.items()}
    out = []
    while any(queues.values()):
        name = rng.choice([n for n, q in queues.items() if q])
        out.append((name, queues[name].pop(0)))
    return out


def streams():
    """name -> [(topic, text)]: each phrasing interleaved, in blocks and mixed at random; a
    stream mixing the phrasings; four topics interleaved."""
    out = {}
    for style in ("terse", "prose", "questions"):
        groups = {name: task[style] for name, task in TASKS.items()}
        assert sum(map(len, groups.values())) == 20
        out[f"{style}-interleaved"] = _round_robin(groups)
        out[f"{style}-blocks"] = _blocks(groups)
        out[f"{style}-mixed"] = _shuffled(groups, seed=len(style))
    styles = ("terse", "prose", "questions")
    mixed = {name: [task[styles[(i + k) % 3]][i] for i in range(7) if i < len(task[styles[(i + k) % 3]])]
             for k, (name, task) in enumerate(TASKS.items())}
    out["styles-interleaved"] = _round_robin(mixed)
    four = {name: task["terse"] for name, task in TASKS.items()}
    four["docker"] = DOCKER
    out["four-interleaved"] = _round_robin(four)
    for name, groups in OTHER.items():
        out[f"{name}-interleaved"] = _round_robin(groups)
        out[f"{name}-mixed"] = _shuffled(groups, seed=len(name))
    return out


def held_out_streams():
    """name -> [(topic, text)] of HELD_OUT, round-robin and mixed at random, as in streams()."""
    out = {}
    for name, groups in HELD_OUT.items():
        out[f"{name}-interleaved"] = _round_robin(groups)
        out[f"{name}-mixed"] = _shuffled(groups, seed=len(name))
    return out


def purity(members):
    """members: {thread: [topic of each message]} -> share of messages in their thread's
    majority topic."""
    total = sum(len(m) for m in members.values())
    return sum(collections.Counter(m).most_common(1)[0][1] for m in members.values() if m) / total


def fragmentation(members):
    """Threads per topic: 1.0 is one thread each."""
    topics = {t for m in members.values() for t in m}
    return sum(1 for m in members.values() if m) / len(topics)


def singles(members):
    """Share of threads with a single message."""
    kept = [m for m in members.values() if m]
    return sum(1 for m in kept if len(m) == 1) / len(kept)
