-- outbox-mailer schema, version 11: transport limits shared by every daemon on the database.
--
-- RATE_PER_SECOND/BURST and DAILY_LIMIT used to be a token bucket inside each daemon, so three
-- daemons sent three times the rate. Now each daemon takes grants of capacity from these tables,
-- a batch at a time (outbox_mailer/quotas.py), never a round trip per email. Nothing here touches
-- email_deliveries: a database whose transports have no limit never reads these tables.
--
-- email_transport_limits: one row per limited transport, the state of its request rate as a
--   generic cell rate algorithm (GCRA): next_at is when the next request is due at the rate in
--   force. A grant of k requests moves next_at k intervals on; a request may go up to BURST - 1
--   intervals (at RATE_PER_SECOND) before its due time, never before held_until. rate_share is
--   the share of RATE_PER_SECOND in force at share_at: throttling replies lower it, and it climbs back linearly with time.
-- email_transport_usage: requests and recipients granted per slot of DAILY_WINDOW_SECONDS / 100,
--   the rolling window DAILY_LIMIT is counted over (a slot counts while any part of it is in the
--   window: a grant never exceeds the limit over any window of that length).

CREATE TABLE email_transport_limits (
    transport    text PRIMARY KEY,
    next_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    rate_share   double precision NOT NULL DEFAULT 1 CHECK (rate_share > 0 AND rate_share <= 1),
    share_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    throttles    bigint NOT NULL DEFAULT 0,
    throttled_at timestamptz,
    held_until   timestamptz  -- a throttling reply's Retry-After: no request is due before it
);

CREATE TABLE email_transport_usage (
    transport    text NOT NULL,
    slot_start   timestamptz NOT NULL,
    slot_seconds double precision NOT NULL CHECK (slot_seconds > 0),
    requests     bigint NOT NULL DEFAULT 0,
    recipients   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (transport, slot_start)
);

-- One grant: up to p_requests request slots due within p_horizon seconds (at the rate in force),
-- and up to p_recipients recipients within the rolling window (no request slot when fewer
-- recipients than asked are left: the send that needs them waits); p_returned recipients granted
-- earlier in slot p_returned_slot and never used go back first. Serialised per transport by the
-- row lock; each statement inside sees what the grant before it wrote.
-- Returns: requests granted, the first one due in first_in seconds (negative: due now) and each
-- next one spacing seconds later, less BURST - 1 spacings of tolerance (tolerance); recipients
-- granted, the slot they are counted in and the seconds until it ends (they must be used by
-- then: a recipient sent later would fall outside the windows that count it), the recipients
-- used in the window (this grant included), and when short of recipients, in how many seconds the oldest counted slot leaves
-- the window (free_in); the rate in force (null: no rate limit), and the throttles so far.
CREATE FUNCTION email_take_capacity(
    p_transport text, p_rate double precision, p_burst integer, p_requests integer,
    p_horizon double precision, p_daily_limit bigint, p_window double precision, p_recipients bigint,
    p_returned bigint, p_returned_slot timestamptz, p_recovery double precision)
RETURNS TABLE (requests integer, first_in double precision, spacing double precision,
               tolerance double precision, recipients bigint, slot timestamptz, slot_left double precision,
               used bigint, free_in double precision, rate double precision, throttles bigint)
LANGUAGE plpgsql AS $$
DECLARE
    lim email_transport_limits;
    t timestamptz;
    start timestamptz;
    width double precision := p_window / 100;
BEGIN
    INSERT INTO email_transport_limits AS l (transport) VALUES (p_transport) ON CONFLICT DO NOTHING;
    SELECT * INTO lim FROM email_transport_limits AS l WHERE l.transport = p_transport FOR UPDATE;
    t := clock_timestamp();
    requests := 0; first_in := 0; spacing := 0; tolerance := 0; recipients := 0; used := 0;
    throttles := lim.throttles;
    slot := to_timestamp(floor(extract(epoch FROM t) / width) * width);
    slot_left := extract(epoch FROM slot - t) + width;
    IF p_returned > 0 AND p_returned_slot IS NOT NULL THEN
        UPDATE email_transport_usage AS u SET recipients = greatest(0, u.recipients - p_returned)
         WHERE u.transport = p_transport AND u.slot_start = p_returned_slot;
    END IF;
    IF p_daily_limit IS NOT NULL THEN
        SELECT coalesce(sum(u.recipients), 0) INTO used FROM email_transport_usage AS u
         WHERE u.transport = p_transport
           AND u.slot_start > t - make_interval(secs => p_window + u.slot_seconds);
        recipients := least(p_recipients, greatest(0, p_daily_limit - used));
        used := used + recipients;
        IF recipients < p_recipients THEN
            SELECT extract(epoch FROM min(u.slot_start + make_interval(secs => p_window + u.slot_seconds)) - t)
              INTO free_in FROM email_transport_usage AS u
             WHERE u.transport = p_transport AND u.recipients > 0
               AND u.slot_start > t - make_interval(secs => p_window + u.slot_seconds);
        END IF;
    END IF;
    IF p_rate IS NOT NULL THEN
        rate := p_rate * least(1, lim.rate_share + greatest(0, extract(epoch FROM t - lim.share_at)) / p_recovery);
        spacing := 1 / rate;
        tolerance := (p_burst - 1) / p_rate;  -- at the configured rate: a lowered one never brings slots forward
        start := greatest(lim.next_at, t);
        first_in := extract(epoch FROM start - t) - tolerance;
        first_in := greatest(first_in, coalesce(extract(epoch FROM lim.held_until - t), first_in));
        IF p_requests > 0 AND recipients = p_recipients THEN
            requests := least(p_requests, greatest(0, floor((p_horizon - first_in) / spacing) + 1))::integer;
        END IF;
        IF requests > 0 THEN
            UPDATE email_transport_limits AS l SET next_at = start + make_interval(secs => requests * spacing)
             WHERE l.transport = p_transport;
        END IF;
    ELSIF p_requests > 0 AND recipients = p_recipients THEN
        requests := p_requests;
    END IF;
    IF requests > 0 OR recipients > 0 THEN
        INSERT INTO email_transport_usage AS u (transport, slot_start, slot_seconds, requests, recipients)
        VALUES (p_transport, slot, width, requests, recipients)
        ON CONFLICT (transport, slot_start)
        DO UPDATE SET requests = u.requests + excluded.requests, recipients = u.recipients + excluded.recipients;
        DELETE FROM email_transport_usage AS u
         WHERE u.transport = p_transport AND u.slot_start < t - make_interval(secs => p_window)
           AND u.slot_start <= t - make_interval(secs => p_window + u.slot_seconds);
    END IF;
    RETURN NEXT;
END $$;

-- A throttling reply (a 429 naming no quota, SMTP 421, 451 4.7.x, 454 4.7.0): the rate in force
-- is multiplied by p_factor (never below p_min_share of RATE_PER_SECOND), at most once every
-- p_cooldown seconds (the replies to requests already under way say nothing new), and no request
-- is due for p_hold seconds (the reply's Retry-After). Returns the share now in force, and
-- whether this call lowered it.
CREATE FUNCTION email_throttle_transport(
    p_transport text, p_factor double precision, p_min_share double precision, p_hold double precision,
    p_recovery double precision, p_cooldown double precision)
RETURNS TABLE (rate_share double precision, lowered boolean)
LANGUAGE plpgsql AS $$
DECLARE
    lim email_transport_limits;
    t timestamptz;
BEGIN
    INSERT INTO email_transport_limits AS l (transport) VALUES (p_transport) ON CONFLICT DO NOTHING;
    SELECT * INTO lim FROM email_transport_limits AS l WHERE l.transport = p_transport FOR UPDATE;
    t := clock_timestamp();
    rate_share := least(1, lim.rate_share + greatest(0, extract(epoch FROM t - lim.share_at)) / p_recovery);
    lowered := lim.throttled_at IS NULL OR lim.throttled_at <= t - make_interval(secs => p_cooldown);
    IF lowered THEN
        rate_share := greatest(p_min_share, rate_share * p_factor);
    END IF;
    UPDATE email_transport_limits AS l
       SET rate_share = email_throttle_transport.rate_share, share_at = t,
           throttles = l.throttles + lowered::integer,
           throttled_at = CASE WHEN lowered THEN t ELSE l.throttled_at END,
           next_at = greatest(l.next_at, t + make_interval(secs => greatest(p_hold, 0))),
           held_until = greatest(l.held_until, t + make_interval(secs => greatest(p_hold, 0)))
     WHERE l.transport = p_transport;
    RETURN NEXT;
END $$;
