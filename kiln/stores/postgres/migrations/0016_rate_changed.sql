-- kiln schema, version 16 (PostgreSQL).
-- When a key's limit (rate, per, burst) last changed: the admission counts the key's
-- admissions in its window only within ``per`` of a change. Otherwise the token bucket
-- alone keeps every window of ``per`` within rate + burst (capacity max(burst, 1),
-- refill rate per per: at most max(burst, 1) + rate - 1 in any window), and counting
-- the window cost a read of up to rate + burst index entries per admission (59 ms at
-- RateLimit(100000, per=3600)). Rows of older versions count as changed now.
ALTER TABLE kiln_rate_limits ADD COLUMN IF NOT EXISTS changed_at TIMESTAMPTZ NOT NULL DEFAULT now();
