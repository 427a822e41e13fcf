-- wrk script: load test for POST /push/devices (device registration).
--
--   wrk -t2 -c64 -d30s --latency -s bench/registration/register.lua \
--       http://127.0.0.1:18080 -- /path/to/jwts.txt
--
-- Inputs (wrk args after "--" win over environment variables):
--   arg 1 / JWT_FILE      file from gen_tokens.py: line u = JWT of user u (required)
--   arg 2 / WRK_THREADS   the -t value; when given, users are split between
--                         threads so each user is driven by one thread only
--   REREG_RATIO           share of re-registrations (default 0.10)
--   BENCH_RUN_ID          tag put in every token (default: random per run), so a
--                         warm-up run and the measured run never share tokens
--
-- Workload: every request registers a brand-new FCM-like token for the next
-- user of this thread (users cycle round-robin), except ~REREG_RATIO of them,
-- which re-send an earlier registration of this thread unchanged (same user,
-- token, platform, deviceId): the idempotent "app restarted" path.
--
-- Output: per-status counts, and one machine-readable line that run.sh parses:
--   RESULT requests=N duration_s=S rps=R p50_ms=X p90_ms=X p99_ms=X max_ms=X non2xx=N socket_errors=N rereg=N
-- Any non-2xx response or socket error is printed as an ERROR: such a run is
-- not a valid benchmark result.

-- ---------------------------------------------------------------- main state
-- setup() and done() run in the main Lua state; each thread has its own state.
local threads = {}
local main_run_id = (os.getenv("BENCH_RUN_ID") or ""):gsub("[^%w]", "")  -- not "run_id": threads get that global

local ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

local function random_string(n, alphabet)
   local t = {}
   for i = 1, n do
      local k = math.random(1, #alphabet)
      t[i] = alphabet:sub(k, k)
   end
   return table.concat(t)
end

function setup(thread)
   if main_run_id == nil or main_run_id == "" then
      -- os.time() alone repeats within a second; os.clock() adds CPU-time noise.
      math.randomseed(os.time() + math.floor(os.clock() * 1e6))
      main_run_id = random_string(8, ALNUM)
   end
   table.insert(threads, thread)
   thread:set("tid", #threads)        -- 1-based thread id, unique in this run
   thread:set("run_id", main_run_id)  -- global "run_id" in the thread state
end

-- ------------------------------------------------------------ thread states
local jwts = {}            -- jwts[u] = bearer token of user u
local nusers = 0
local my_users = {}        -- users this thread drives
local next_user = 1        -- index into my_users (round-robin)
local dev_count = {}       -- dev_count[u] = devices this thread made for user u
local token_seq = 0        -- per-thread counter: unique part of new tokens
local filler               -- per-thread random tail that makes tokens FCM-long
local rereg_ratio = tonumber(os.getenv("REREG_RATIO") or "") or 0.10

-- Requests already sent, for re-registration. Only entries at least LAG
-- requests old are re-sent: with at most a few dozen connections per thread
-- they have long completed (or hit wrk's 2 s timeout), so we really re-send
-- a registration that the server already processed.
local RING, LAG = 16384, 2048
local sent_seq = 0
local ring_u, ring_body = {}, {}

statuses = {}              -- global: read by done() via thread:get()
rereg = 0
socket_errors = 0

function init(args)
   local path = args[1] or os.getenv("JWT_FILE")
   assert(path and path ~= "", "register.lua: give the JWT file as 'wrk ... -- FILE' or JWT_FILE")
   local f = assert(io.open(path, "r"), "register.lua: cannot open " .. path)
   for line in f:lines() do
      if line ~= "" then
         nusers = nusers + 1
         jwts[nusers] = line
      end
   end
   f:close()
   assert(nusers > 0, "register.lua: no tokens in " .. path)

   local nthreads = tonumber(args[2] or os.getenv("WRK_THREADS") or "")
   if nthreads and nthreads >= tid then
      -- Disjoint user sets: user u belongs to thread ((u-1) % nthreads) + 1.
      for u = tid, nusers, nthreads do my_users[#my_users + 1] = u end
   else
      -- Thread count unknown: all threads share the users; start each thread at
      -- a different offset. deviceIds stay unique because they include tid.
      for i = 0, nusers - 1 do
         my_users[#my_users + 1] = ((i + (tid - 1) * 7919) % nusers) + 1
      end
   end
   assert(#my_users > 0, "register.lua: fewer users than threads")

   math.randomseed(os.time() * 100 + tid)
   -- FCM registration tokens look like "<22 chars>:APA91b<~130 chars>".
   filler = random_string(134, ALNUM .. "_-")
end

local function body_for(u)
   local n = (dev_count[u] or 0) + 1
   dev_count[u] = n
   token_seq = token_seq + 1
   -- Unique part: run id + thread id + counter, so no two threads or runs collide.
   local token = string.format("%s%02dc%011d:APA91b%s", run_id, tid, token_seq, filler)
   local platform = (u % 2 == 0) and "android" or "ios"
   -- k = tid*1e6 + n: unique per (thread, user) even when threads share users.
   local device_id = string.format("dev-%d-%d", u, tid * 1000000 + n)
   return string.format('{"token":"%s","platform":"%s","deviceId":"%s"}',
                        token, platform, device_id)
end

local function make_request(u, body)
   return wrk.format("POST", "/push/devices", {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "Bearer " .. jwts[u],
   }, body)
end

function request()
   local u, body
   local oldest = math.max(1, sent_seq - RING + 1)
   local newest = sent_seq - LAG
   if newest >= oldest and math.random() < rereg_ratio then
      local slot = math.random(oldest, newest) % RING
      u, body = ring_u[slot], ring_body[slot]
      rereg = rereg + 1
   else
      u = my_users[next_user]
      next_user = next_user % #my_users + 1
      body = body_for(u)
      sent_seq = sent_seq + 1
      ring_u[sent_seq % RING], ring_body[sent_seq % RING] = u, body
   end
   return make_request(u, body)
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

-- ---------------------------------------------------------------- main state
function done(summary, latency, requests)
   local counts, total_rereg, non2xx = {}, 0, 0
   for _, t in ipairs(threads) do
      for status, n in pairs(t:get("statuses") or {}) do
         counts[status] = (counts[status] or 0) + n
      end
      total_rereg = total_rereg + (t:get("rereg") or 0)
   end

   local keys = {}
   for status in pairs(counts) do keys[#keys + 1] = status end
   table.sort(keys)
   io.write("\nHTTP status counts:\n")
   for _, status in ipairs(keys) do
      io.write(string.format("  %d: %d\n", status, counts[status]))
      if status < 200 or status > 299 then non2xx = non2xx + counts[status] end
   end

   local e = summary.errors
   local sock = e.connect + e.read + e.write + e.timeout
   local secs = summary.duration / 1e6
   io.write(string.format(
      "RESULT requests=%d duration_s=%.2f rps=%.1f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f non2xx=%d socket_errors=%d rereg=%d\n",
      summary.requests, secs, summary.requests / secs,
      latency:percentile(50) / 1000, latency:percentile(90) / 1000,
      latency:percentile(99) / 1000, latency.max / 1000,
      non2xx, sock, total_rereg))

   if non2xx > 0 or sock > 0 then
      io.write(string.rep("!", 72) .. "\n")
      io.write(string.format("ERROR: %d non-2xx responses, %d socket errors "
         .. "(connect %d, read %d, write %d, timeout %d).\n",
         non2xx, sock, e.connect, e.read, e.write, e.timeout))
      io.write("ERROR: this run is NOT a valid benchmark result.\n")
      io.write(string.rep("!", 72) .. "\n")
   end
end
