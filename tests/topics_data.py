"""Twenty captures on three unrelated topics, interleaved, shared by several tests."""

JWT = [
    "Implement JWT refresh token rotation in auth/tokens.py so each refresh issues a new refresh token",
    "The JWT refresh endpoint must revoke the old refresh token when rotation happens",
    "Store refresh token hashes in the sessions table and check JWT expiry before refreshing",
    "Add a test: reusing a rotated JWT refresh token must revoke the whole token family",
    "Shorten JWT access token lifetime to 15 minutes; refresh tokens live 30 days",
    "JWT refresh token rotation bug: the refresh handler returned the same refresh token twice",
    "Sign JWT access tokens with RS256 and keep the refresh token opaque",
]
PG = [
    "Write the Postgres migration that adds a tenant_id column to the orders table",
    "The Postgres migration must backfill tenant_id for existing orders rows in batches",
    "Create a Postgres index concurrently on orders(tenant_id) in the migration",
    "Postgres migration failed: lock timeout on ALTER TABLE orders, retry with lock_timeout",
    "Roll back the Postgres migration with a down script that drops the tenant_id column",
    "Run the Postgres migration on staging and check the orders table row count",
    "Postgres migration 0042: make tenant_id NOT NULL after the backfill",
]
CSS = [
    "CSS layout bug: the sidebar overlaps the main content on narrow screens",
    "Fix the CSS grid layout so the sidebar column collapses below 768px",
    "The CSS flexbox footer is pushed off screen by the sidebar layout",
    "CSS layout: use grid-template-columns minmax for the sidebar width",
    "Sidebar CSS layout regression in Safari: the grid gap is ignored",
    "CSS layout bug fixed with a media query that stacks the sidebar under the content",
]
TOPICS = {"jwt": JWT, "postgres": PG, "css": CSS}


def interleaved():
    """(topic, text) pairs, round-robin across the three topics: 20 in all."""
    out = []
    for i in range(max(len(v) for v in TOPICS.values())):
        for name, texts in TOPICS.items():
            if i < len(texts):
                out.append((name, texts[i]))
    return out
