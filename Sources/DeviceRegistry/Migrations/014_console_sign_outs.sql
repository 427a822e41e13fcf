-- Console sessions signed out. A session is otherwise only its signed cookie, which every
-- push-api replica accepts: kept here, a sign-out on one replica is refused by all of them and
-- outlives a restart. A row lasts as long as the cookie would have.
CREATE TABLE console_sign_outs (
    session_id  text PRIMARY KEY CHECK (session_id ~ '^[0-9a-f]{32}$'),
    expires_at  timestamptz NOT NULL
);
