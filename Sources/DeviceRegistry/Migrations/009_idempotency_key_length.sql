-- An empty idempotency key is a mistake (a cron line whose variable is unset), never a key: as
-- one it would answer every later run with the first job's id and send nothing. Keys are 1 to
-- 200 characters, as push-api has always required; checked before the insert (a trigger fires
-- before ON CONFLICT looks for the key), with the functions' own error code.
CREATE FUNCTION push_jobs_check_idempotency_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT char_length(NEW.idempotency_key) BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'idempotency key must be 1 to 200 characters (leave it out for none)' USING ERRCODE = '22023';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER push_jobs_idempotency_key_length BEFORE INSERT ON push_jobs
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL) EXECUTE FUNCTION push_jobs_check_idempotency_key();
