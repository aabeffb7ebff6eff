-- The schema leased made at version 1 (storage/pgsql.c and postgres.c
-- at commit 1b17c91), for the upgrade tests in test_postgres.py: the
-- leases and meta tables and every function, as that version wrote them.
-- Never edited: a later version's change goes into pgsql_upgrade.

CREATE TABLE leased_meta (key text PRIMARY KEY, value bigint NOT NULL);

CREATE TABLE leased_leases ( session bytea PRIMARY KEY, owner bytea NOT NULL, token bigint NOT NULL, expiry_ns bigint NOT NULL, generation bigint NOT NULL);

CREATE FUNCTION leased_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint $$;

CREATE FUNCTION leased_meta_value(k text) RETURNS bigint LANGUAGE sql STABLE AS $$ SELECT value FROM leased_meta WHERE key = k $$;

CREATE FUNCTION leased_live(r leased_leases, now_ns bigint) RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT r.owner <> '' AND (now_ns < r.expiry_ns OR  (r.generation < leased_meta_value('generation') AND   now_ns < leased_meta_value('quarantine_end_ns'))) $$;

CREATE FUNCTION leased_begin() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared(1818583411, 2); RETURN leased_now(); END $$;

CREATE FUNCTION leased_acquire(s bytea, o bytea, ttl bigint,  OUT code int, OUT tok bigint, OUT exp bigint, OUT flags int) LANGUAGE plpgsql AS $$ DECLARE r leased_leases; had boolean; now_ns bigint; BEGIN  flags := 0;  LOOP   SELECT * INTO r FROM leased_leases WHERE session = s FOR UPDATE;   had := FOUND;   now_ns := leased_now();   IF had AND leased_live(r, now_ns) THEN    IF r.owner <> o THEN code := 1; RETURN; END IF;    exp := greatest(now_ns + ttl, r.expiry_ns + 1);    UPDATE leased_leases SET expiry_ns = exp WHERE session = s;    code := 0; tok := r.token; RETURN;   END IF;   code := 0; exp := now_ns + ttl;   IF had THEN    tok := r.token + 1;    flags := CASE WHEN r.owner <> '' THEN 3 ELSE 1 END;    UPDATE leased_leases SET owner = o, token = tok, expiry_ns = exp,     generation = leased_meta_value('generation') WHERE session = s;    RETURN;   END IF;   tok := leased_meta_value('token_floor') + 1; flags := 1;   INSERT INTO leased_leases VALUES    (s, o, tok, exp, leased_meta_value('generation'))    ON CONFLICT (session) DO NOTHING;   IF FOUND THEN RETURN; END IF;  END LOOP; END $$;

CREATE FUNCTION leased_renew(s bytea, o bytea, t bigint, ttl bigint,  OUT code int, OUT tok bigint, OUT exp bigint, OUT flags int) LANGUAGE plpgsql AS $$ DECLARE r leased_leases; now_ns bigint; BEGIN  flags := 0;  SELECT * INTO r FROM leased_leases WHERE session = s FOR UPDATE;  IF NOT FOUND OR r.owner = '' OR r.owner <> o OR r.token <> t THEN   code := 2; RETURN;  END IF;  now_ns := leased_now();  exp := greatest(now_ns + ttl, r.expiry_ns + 1);  IF r.expiry_ns <= now_ns THEN flags := 4; END IF;  UPDATE leased_leases SET expiry_ns = exp WHERE session = s;  code := 0; tok := r.token; END $$;

CREATE FUNCTION leased_release(s bytea, o bytea, t bigint,  OUT code int, OUT tok bigint, OUT exp bigint, OUT flags int) LANGUAGE plpgsql AS $$ DECLARE r leased_leases; BEGIN  flags := 0;  SELECT * INTO r FROM leased_leases WHERE session = s FOR UPDATE;  IF NOT FOUND OR r.owner = '' OR r.owner <> o OR r.token <> t THEN   code := 3; RETURN;  END IF;  UPDATE leased_leases SET owner = '' WHERE session = s;  code := 0; tok := r.token; exp := r.expiry_ns; END $$;

CREATE FUNCTION leased_collect(ttl bigint, lim int,  OUT collected bigint, OUT expired bigint) LANGUAGE plpgsql AS $$ DECLARE now_ns bigint := leased_now(); top bigint; BEGIN  collected := 0; expired := 0;  IF NOT pg_try_advisory_xact_lock(1818583411, 3) OR NOT EXISTS (   SELECT 1 FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl    AND NOT leased_live(l, now_ns)) THEN RETURN; END IF;  PERFORM pg_advisory_xact_lock(1818583411, 2);  now_ns := leased_now();  WITH gone AS (DELETE FROM leased_leases WHERE session IN (   SELECT session FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl   AND NOT leased_live(l, now_ns) LIMIT lim FOR UPDATE SKIP LOCKED)   RETURNING token, owner)  SELECT count(*), count(*) FILTER (WHERE owner <> ''), max(token)   INTO collected, expired, top FROM gone;  IF collected > 0 THEN   UPDATE leased_meta SET value = greatest(value, top)    WHERE key = 'token_floor';  END IF; END $$;

