-- bridge.lua: the logic of slurm-hetero's job_submit.lua bridge. Plain Lua 5.1 (no //, no
-- bit operators, no goto), testable and lintable as it is.
--
-- `slurm-hetero conf render` writes job_submit.lua as ONE file (slurmctld loads only that):
-- the site's tables, then this file verbatim inside a function called with them. On its
-- own (tests, lint) the tables come as the chunk's argument; a missing one is empty:
--     local hetero = assert(loadfile("bridge.lua"))({ MODELS = {...}, TIERS = {...} })
-- It defines the globals slurm_job_submit and slurm_job_modify, and returns its grammar and
-- snapshot checks for tests.
--
-- Runs inside slurmctld: no shell, no per-job file I/O (the capacity snapshot is re-read at
-- most every SNAPSHOT_CHECK_S s, and only when it changed). Invalid user input rejects the
-- job with one line; internal errors let it pass unchanged.

-- The library functions a decision calls, as upvalues: a global such as string.find is two
-- hash look-ups (the globals, then the library) per call, and in slurmctld every decision
-- starts with cold caches, where each look-up is a miss.
local type, pairs, ipairs, next, pcall, tostring, tonumber = type, pairs, ipairs, next, pcall, tostring, tonumber
local sfind, smatch, gmatch, gsub, ssub = string.find, string.match, string.gmatch, string.gsub, string.sub
local sbyte, sformat, lower, srep = string.byte, string.format, string.lower, string.rep
local floor, ceil, max, min, log, HUGE = math.floor, math.ceil, math.max, math.min, math.log, math.huge
local tconcat, tsort = table.concat, table.sort

local SITE = ...
if type(SITE) ~= "table" then SITE = {} end
local function site(name, default)
    local v = SITE[name]
    if v == nil then return default end
    return v
end

local GRES_PREFIX = site("GRES_PREFIX", "gres:")
local SNAPSHOT_PATH = site("SNAPSHOT_PATH", nil)  -- nil: no snapshot, the static order
local SNAPSHOT_CHECK_S = site("SNAPSHOT_CHECK_S", 2)
local SNAPSHOT_STALE_S = site("SNAPSHOT_STALE_S", 30)
local MODELS = site("MODELS", {})            -- id -> { gres, type, units, mem_mib }
local MODEL_GROUPS = site("MODEL_GROUPS", {})  -- any, vendor, stack -> { id = true }
local MODEL_ALIASES = site("MODEL_ALIASES", {})  -- GRES type -> id
local POOLS = site("POOLS", {})  -- { key, model, arch, per_node, cpus, mem_mib, partitions }, static order
local TIERS = site("TIERS", {})              -- name -> true
local TIER_NOTES = site("TIER_NOTES", {})    -- name -> what the tier allows, for the user
local ENERGY = site("ENERGY", {})            -- name -> { cpu_freq_gov, gpu_freq }
local GRES_PARTITIONS = site("GRES_PARTITIONS", {})  -- GRES name -> "part1,part2"
local IMAGES = site("IMAGES", {})            -- NAME:TAG -> { path, variants = { "arch/stack" } }
local IMAGE_TAGS = site("IMAGE_TAGS", {})    -- NAME -> default TAG
local GRES_STACKS = site("GRES_STACKS", {})  -- "gpu:h100", "gpu" -> stack
local MOUNT_ALLOW = site("MOUNT_ALLOW", {})  -- { source, mode }
local MOUNTS_VAR = site("MOUNTS_VAR", "SLURM_HETERO_MOUNTS")
local PREDICTED_LIMITS = site("PREDICTED_LIMITS", {})  -- partition -> true
local PARTITION_LIMITS = site("PARTITION_LIMITS", {})  -- partition -> minutes
local DEFAULT_PARTITION = site("DEFAULT_PARTITION", "")
local MODEL_LUA = site("MODEL_LUA", nil)     -- the exported runtime model, a Lua chunk
local MIGRATE = site("MIGRATE", false)       -- the daemon may move pending jobs between pools
local FLOAT = site("FLOAT", false)           -- a job may start in any equal pool of its request
local LIMITED_TIERS = site("LIMITED_TIERS", {})  -- tiers with per-model GrpTRES limits -> true
local DEFAULT_TIER = site("DEFAULT_TIER", "")
local SITE_FACTOR = site("SITE_FACTOR", nil)  -- { cap, horizon_min, step }: the daemon's SiteFactor

-- job_submit/lua (22.05) rebuilds slurm.jobs before a call when the job list changed since
-- the last rebuild (last_job_update: whole seconds, so at most once a second): a table, a
-- metatable and a C closure per job slurmctld holds, garbage at the next rebuild. With the
-- model this Lua state holds a live heap of a few MB that every collection cycle marks;
-- pause 400 (default 200) collects half as often, the heap reaching up to 4x its live size.
-- In slurmctld the collector is a small part of the bridge's cost either way (perf with a
-- symbolized liblua: benchmarks/bridge_throughput.py --perf --liblua): the decision's own
-- code, run with cold caches after each sbatch fork, is most of it.
local GC_PAUSE = 400
collectgarbage("setpause", GC_PAUSE)

local OPTION_PREFIX = "_SLURM_SPANK_OPTION_hetero_"
local OPTION_NAMES = { "accel", "arch", "energy", "tier", "image", "checkpoint", "migratable" }
-- Flags (spank has_arg = 0) carry no value: their environment entry is "" in sbatch's own
-- environment and "(null)" in the SPANK job environment (Slurm's xstrcat of a NULL optarg).
local FLAGS = { migratable = true }

-- ---- the option grammar: the same as the SPANK plugin's (spank/hetero_opts.h), case for
-- case (tests/data/grammar/options.cases), because a user can bypass the plugin by setting
-- _SLURM_SPANK_OPTION_hetero_* in sbatch's environment. Explicit ASCII classes only (Lua's
-- %w, %p and lower follow slurmctld's C locale): lower-casing comes after the value
-- is known to be printable ASCII. ----------------------------------------------------------

local MAX_VALUE_LEN = 256                    -- HETERO_VALUE_MAX
local MAX_NAME_LEN = 64                      -- HETERO_ACCEL_NAME_MAX
local MAX_COUNT = 1024                       -- HETERO_COUNT_MAX
local MAX_UNITS_MILLI = 100000 * 1000        -- HETERO_UNITS_MAX, in thousandths
local MAX_DECIMALS = 3                       -- HETERO_UNITS_DECIMALS
local MAX_SIZE = 1125899906842624            -- 2^50: the largest SIZE before its unit
local MAX_MEM_MIB = 1099511627776            -- HETERO_MEM_MAX_MIB, 2^40 MiB
local MAX_POLICY_LEN = 32                    -- HETERO_POLICY_MAX
local MAX_TAG_LEN = 128                      -- HETERO_TAG_MAX
local MEM_MIB = { [""] = 1, m = 1, g = 1024, t = 1048576 }  -- k: rounded up to whole MiB
local ARCHES = { any = "any", x86_64 = "x86_64", aarch64 = "aarch64", arm64 = "aarch64", armv8 = "aarch64" }

local NOT_PRINTABLE = "empty, too long or not printable ASCII"
local ACCEL_FORMS = "use MODEL[:N], VENDOR|STACK[:N], any[:N] or units=U, optionally followed by ,mem>=SIZE"
local COUNT_RULE = "the count must be 1 to 1024"
local UNITS_RULE = "units must be a number above 0 (e.g. units=2.5)"
local MEM_RULE = "bad memory floor: use ,mem>=SIZE (e.g. ,mem>=80G)"
local NAME_RULE = "a name is a letter then up to 31 letters, digits, '_' or '-'"
local CHECKPOINT_FORMS = "use an absolute path (e.g. /shared/ckpt/run1)"
local IMAGE_FORMS = "use NAME[:TAG], NAME being '/'-separated components of letters, digits, " ..
    "'.', '_' or '-' that start with a letter or digit"

-- 1 to 256 bytes of printable ASCII without space: what every option value must be.
local function printable(v)
    return type(v) == "string" and #v > 0 and #v <= MAX_VALUE_LEN and not sfind(v, "[^!-~]")
end

-- Decimal digits without a leading zero, at most limit; nil otherwise. 16 digits stay exact
-- in a double and every limit here is below 10^16.
local function uint(digits, limit)
    if digits == "" or #digits > 16 or (#digits > 1 and sbyte(digits) == 48) then return nil end
    local n = tonumber(digits)
    if n > limit then return nil end
    return n
end

-- --accel: MODEL[:N] | VENDOR|STACK[:N] | any[:N] | units=U, then optionally ,mem>=SIZE.
-- The meaning as hetero_parse_accel gives it: { kind = "name"|"any"|"units", name
-- (lower-cased, "" unless kind is name), count (1 without :N, 0 for units), units_milli,
-- mem_mib (0 when not given), units_text (U as written) }, or nil and why.
local function accel_syntax(value)
    if not printable(value) then return nil, NOT_PRINTABLE end
    local s = lower(value)
    local a = { kind = "name", name = "", count = 1, units_milli = 0, mem_mib = 0 }
    local rest
    if ssub(s, 1, 6) == "units=" then
        local whole, dot, frac
        whole, dot, frac, rest = smatch(s, "^([0-9]*)(%.?)([0-9]*)(.*)$", 7)
        local w = uint(whole, MAX_UNITS_MILLI / 1000)
        if w == nil or (dot == "." and frac == "") then
            return nil, whole == "" and UNITS_RULE or "units must be a decimal number like 2.5 " ..
                "(no sign, exponent, leading zero or trailing dot) of at most 100000"
        end
        if #frac > MAX_DECIMALS then return nil, "units has more than 3 decimals" end
        local milli = w * 1000 + (tonumber(frac .. srep("0", MAX_DECIMALS - #frac)))
        if milli == 0 then return nil, UNITS_RULE end
        if milli > MAX_UNITS_MILLI then return nil, "units must be at most 100000" end
        a.kind, a.count, a.units_milli, a.units_text = "units", 0, milli, whole .. dot .. frac
    else
        local name
        name, rest = smatch(s, "^([a-z0-9][a-z0-9._%-]*)(.*)$")
        if name == nil then return nil, ACCEL_FORMS end
        if #name > MAX_NAME_LEN then return nil, "the name is longer than 64 characters" end
        if name == "any" then a.kind = "any" else a.name = name end
        if sbyte(rest) == 58 then  -- ":"
            local digits
            digits, rest = smatch(rest, "^:([0-9]*)(.*)$")
            local n = uint(digits, MAX_COUNT)
            if n == nil or n < 1 then return nil, COUNT_RULE end
            a.count = n
        end
    end
    if rest ~= "" then
        if sbyte(rest) ~= 44 then return nil, ACCEL_FORMS end  -- not ","
        local digits, unit, b = smatch(rest, "^,mem>=([0-9]*)([kmgt]?)(b?)$")
        if digits == nil or (b ~= "" and unit == "") then return nil, MEM_RULE end
        local n = uint(digits, MAX_SIZE)
        if n == nil or n < 1 then  -- digits without a leading zero: above the limit
            return nil, (n == nil and sfind(digits, "^[1-9]")) and
                "the memory floor is too large" or MEM_RULE
        end
        local mib = unit == "k" and ceil(n / 1024) or n * MEM_MIB[unit]
        if mib > MAX_MEM_MIB then return nil, "the memory floor is too large" end
        a.mem_mib = mib
    end
    return a
end

-- --arch: any, x86_64, aarch64 or the aliases arm64, armv8, in any case: { arch }.
local function arch_syntax(value)
    if not printable(value) then return nil, NOT_PRINTABLE end
    local arch = ARCHES[lower(value)]
    if arch == nil then return nil, "use any, x86_64 or aarch64 (aliases arm64, ARMv8)" end
    return { arch = arch }
end

-- --energy and --tier: a name (a letter, then letters, digits, '_' or '-'; at most 32),
-- in any case; on the `allowed` list (lower-case name -> anything) unless that is nil,
-- as the plugin does without plugstack lists: { name } lower-cased.
local function name_syntax(value, allowed)
    if not printable(value) then return nil, NOT_PRINTABLE end
    local s = lower(value)
    if #s > MAX_POLICY_LEN or not sfind(s, "^[a-z][a-z0-9_%-]*$") then return nil, NAME_RULE end
    if allowed ~= nil and allowed[s] == nil then return nil, "not offered on this cluster" end
    return { name = s }
end

-- --image: NAME[:TAG], NAME '/'-separated components [A-Za-z0-9][A-Za-z0-9._-]*, TAG
-- [A-Za-z0-9_][A-Za-z0-9._-]* of at most 128: { name, tag ("" when not given) }.
local function image_syntax(value)
    if not printable(value) then return nil, NOT_PRINTABLE end
    local name, tag = value, ""
    local colon = sfind(value, ":", 1, true)
    if colon then
        name, tag = ssub(value, 1, colon - 1), ssub(value, colon + 1)
        if #tag > MAX_TAG_LEN or not sfind(tag, "^[A-Za-z0-9_][A-Za-z0-9._%-]*$") then
            return nil, IMAGE_FORMS
        end
    end
    local pos = 1
    while true do
        local stop = smatch(name, "^[A-Za-z0-9][A-Za-z0-9._%-]*()", pos)
        if stop == nil then return nil, IMAGE_FORMS end
        if stop > #name then break end
        if sbyte(name, stop) ~= 47 then return nil, IMAGE_FORMS end  -- not "/"
        pos = stop + 1
    end
    return { name = name, tag = tag }
end

-- --checkpoint=DIR: an absolute path, printable ASCII without whitespace, no ".."
-- component: { path } as given.
local function checkpoint_syntax(value)
    if not printable(value) then return nil, NOT_PRINTABLE .. " (whitespace included)" end
    if sbyte(value) ~= 47 then return nil, CHECKPOINT_FORMS end  -- not "/"
    if sfind(value .. "/", "/../", 1, true) then
        return nil, "'..' components are not allowed; " .. CHECKPOINT_FORMS
    end
    return { path = value }
end

-- --migratable: a flag; any value is refused: {}.
local function migratable_syntax(value)
    if value ~= "" and value ~= "(null)" then return nil, "a flag takes no value" end
    return {}
end

local function sorted_keys(t)
    local out = {}
    for k in pairs(t) do out[#out + 1] = k end
    tsort(out)
    return tconcat(out, ", ")
end
local KNOWN_ACCEL = sorted_keys(MODELS) .. ", " .. sorted_keys(MODEL_GROUPS)

-- A user's value, made safe to echo: printable ASCII only, at most 64 characters.
local function shown(value)
    local s = gsub(ssub(value, 1, 64), "[^ -~]", "?")
    if #value > 64 then s = s .. "..." end
    return s
end

local function reject(option, value, why)
    return nil, "hetero: --" .. option .. "=" .. shown(value) .. ": " .. why
end

-- A JSON string of s: control characters, '"', '\\' and '`' escaped (readers of the admin
-- comment turn backquotes into quotes: sacctmgr stores quotes as backquotes).
local function json_escape(c) return sformat("\\u%04x", sbyte(c)) end
local function json_string(s)
    if not sfind(s, '[%c"\\`]') then return '"' .. s .. '"' end  -- the usual case: nothing to escape
    return '"' .. gsub(s, '[%c"\\`]', json_escape) .. '"'
end

-- ---- option meaning: the site's models, groups and aliases ---------------------------

-- Accepted --accel values, parsed: users repeat a few values and slurmctld runs the bridge
-- under its locks, so each is parsed once (the result is only read). Emptied when full.
local ACCEL_MEMO_MAX = 512
local accel_memo, accel_memo_n = {}, 0

local function parse_accel(value)
    local req = accel_memo[value]
    if req then return req end
    local a, why = accel_syntax(value)
    if a == nil then return reject("accel", value, why) end
    req = { mem = a.mem_mib > 0 and a.mem_mib or nil }
    if a.kind == "units" then
        req.units = a.units_milli / 1000
        req.set = MODEL_GROUPS["any"] or {}
        req.text = "units=" .. a.units_text
    else
        local name = a.kind == "any" and "any" or a.name
        req.n = a.count
        local mid = MODEL_ALIASES[name] or name
        if MODELS[mid] then
            req.set = { [mid] = true }
        elseif MODEL_GROUPS[name] then
            req.set = MODEL_GROUPS[name]
        else
            return reject("accel", value, "unknown model, vendor or stack '" .. shown(name) ..
                "'; this site has: " .. KNOWN_ACCEL)
        end
        req.text = name .. ":" .. req.n
    end
    if req.mem then req.text = req.text .. ",mem>=" .. floor(req.mem / 1024) .. "G" end
    req.json = '"accel":' .. json_string(req.text)
    if accel_memo_n >= ACCEL_MEMO_MAX then accel_memo, accel_memo_n = {}, 0 end
    accel_memo[value], accel_memo_n = req, accel_memo_n + 1
    return req
end

-- Each option's value, from one place: the job's environment when it holds any of them (sbatch
-- puts every option it processed there, as does a user who sets the variables without the
-- plugin), else the SPANK job environment (srun, salloc, sbatch --export=NONE), read in one
-- pass. sbatch carries each option in both: reading the second one too cost every job a table
-- of strings and a pattern match per entry for nothing. nil when no option is given.
local OPTION_KEYS = {}  -- the environment names, made once
local KNOWN_OPTION = {}
for i, name in ipairs(OPTION_NAMES) do OPTION_KEYS[i], KNOWN_OPTION[name] = OPTION_PREFIX .. name, true end
local SPANK_ENTRY = "^" .. OPTION_PREFIX .. "([%w_]+)=(.*)$"  -- the prefix has no magic characters
local function read_options(job_desc)
    local opts, seen = {}, false
    local env = job_desc.environment
    if env then
        for i, name in ipairs(OPTION_NAMES) do
            local v = env[OPTION_KEYS[i]]
            if v ~= nil then opts[name], seen = v, true end
        end
        if seen then return opts end
    end
    local senv = job_desc.spank_job_env
    if senv == nil then return nil end
    for _, kv in pairs(senv) do  -- slurmctld fills it from index 0: not ipairs
        local k, val = smatch(kv, SPANK_ENTRY)
        if k and KNOWN_OPTION[k] then opts[k], seen = val, true end
    end
    return seen and opts or nil
end

-- ---- capacity snapshot ---------------------------------------------------------------
-- Written by `slurm-hetero bridge snapshot` (slurm_hetero/bridge/snapshot.py), atomically:
--   -- hetero-snapshot GENERATION
--   return { generated_at = EPOCH_S, pools = { ["model@arch"] = { total = N, free = N,
--            free_max_node = N, pending = N [, fit = { { CPUS, MEM_MIB }, ... }] }, ... },
--            forecast = { ... } }
-- fit (placement.node_fit): entry k is what the node with k or more devices free that has
-- the most CPUs free has free, for k up to free_max_node and FIT_MAX.
-- Re-read at most every SNAPSHOT_CHECK_S s and loaded only when GENERATION changed: with
-- bounded reads, as data only (not_data), in an empty environment, under an instruction
-- cap, then checked field by field. A pool with a bad field is left out (one log line per
-- load), so the bridge ranks it as if the snapshot did not list it. A new generation
-- rejected whole (too large, not data, no usable time) leaves the last good snapshot in
-- place until that goes stale, with one log line; a file without a generation line counts
-- as none. Fresh: at most SNAPSHOT_STALE_S old and not dated more than CLOCK_SKEW_S ahead
-- of slurmctld's clock (a writer whose clock runs ahead must not look fresh forever).

local CLOCK_SKEW_S = 5
local MAX_DEVICES = 2147483647
local SNAPSHOT_INSTRUCTIONS = 1000000
-- The whole file, read with bounded reads. The largest site the schema allows (256 added
-- models and the catalog, two arches, 64-character ids, 10-digit counts, a forecast) writes
-- about 180 KiB, and about 350 KiB with FIT_MAX fit entries of 7-digit figures per pool. A
-- data-only chunk (not_data) allocates in proportion to its size: ~40 bytes per byte at most
-- as measured (`{{{}}},` over and over), ~20 MiB at this cap, once.
local SNAPSHOT_MAX_BYTES = 524288
local SNAPSHOT_HEAD_BYTES = 128  -- the generation line ends within it
local POOL_FIELDS = { "total", "free", "free_max_node", "pending" }
local FIT_MAX = 16  -- as snapshot.py writes: more devices on one node never "start now"
local DATA_WORDS = { ["return"] = true, ["true"] = true, ["false"] = true, ["nil"] = true }

-- Why a chunk is not data only, or nil. The instruction cap bounds time, not memory:
-- `('x'):rep(2^28)`, or `x = x .. x` 28 times, allocates 256 MiB in a few instructions. So
-- the chunk is first tokenized as Lua 5.1's lexer does, and may hold nothing but strings,
-- numerals, comments, the punctuation { } [ ] = , ; + - * /, the words return true false
-- nil, and names directly followed by one `=` (a field name, or a global of the chunk's
-- empty environment). No name is ever read and there is no `(`, so no expression is a
-- function to call (f"s" and f{} too need a name read or a `(`) or a value to index (no `:`
-- or `.` either); no `..`, so nothing is concatenated; no function, for, while or repeat, so
-- each statement runs once. Every value is a constant, a number, or a table the file spells
-- out entry by entry: memory is linear in the file's size, which is capped. Where this scan
-- and Lua could end a string differently, the chunk is refused: a raw newline in a quoted
-- string (Lua fails on it too), `[[` inside `[[...]]` (an error or nesting, depending on
-- how Lua 5.1 was built). Outside strings only the ASCII above may appear: no byte a locale
-- could make a letter, no ESC of a precompiled chunk. Each search starts where the last one
-- ended: linear time.
local function not_data(text)
    local pos = 1
    while true do
        pos = sfind(text, "[^ \t\r\n{}%],;=+*/]", pos)  -- space and plain punctuation skipped
        if pos == nil then return nil end
        local c, c2 = sbyte(text, pos, pos + 1)
        local eq, body  -- a long bracket's level and where its content starts
        if (c >= 97 and c <= 122) or (c >= 65 and c <= 90) or c == 95 then  -- a name
            local stop, nxt = smatch(text, "^[A-Za-z0-9_]+()[ \t\r\n]*()", pos)
            local b, b2 = sbyte(text, nxt, nxt + 1)
            if (b ~= 61 or b2 == 61) and not DATA_WORDS[ssub(text, pos, stop - 1)] then
                return "'" .. ssub(text, pos, min(stop - 1, pos + 15)) .. "' at byte " .. pos ..
                    " is not a field name"  -- not followed by one "="
            end
            pos = nxt
        elseif c >= 48 and c <= 57 or (c == 46 and c2 and c2 >= 48 and c2 <= 57) then
            -- a numeral as Lua 5.1 reads one: digits and dots, E and a sign, alphanumerics
            local stop = smatch(text, "^[0-9]+()[^0-9.A-Za-z_]", pos)  -- the usual: digits only
            if stop then
                pos = stop
            else
                pos = smatch(text, "^[0-9.]*()", pos)
                local e = sbyte(text, pos)
                if e == 69 or e == 101 then pos = smatch(text, "^.[+-]?()", pos) end
                pos = smatch(text, "^[A-Za-z0-9_]*()", pos)
            end
        elseif c == 34 or c == 39 then  -- a quoted string: a backslash takes the next byte
            local stops = c == 34 and '["\\\r\n]' or "['\\\r\n]"
            local i = pos + 1
            while true do
                i = sfind(text, stops, i)
                local b = i and sbyte(text, i)
                if b == c then break end
                if b ~= 92 then return "an unfinished string at byte " .. pos end
                i = i + 2
            end
            pos = i + 1
        elseif c == 91 then  -- "[": a long string, or an index
            if c2 == 61 or c2 == 91 then
                eq, body = smatch(text, "^%[(=*)%[()", pos)
                if body == nil then return "a bad long bracket at byte " .. pos end
            else
                pos = pos + 1
            end
        elseif c == 45 then  -- "-", or a comment: long, or to the end of the line
            if c2 ~= 45 then
                pos = pos + 1
            else
                eq, body = smatch(text, "^%-%-%[(=*)%[()", pos)
                if body == nil then
                    pos = sfind(text, "[\r\n]", pos)
                    if pos == nil then return nil end
                end
            end
        else
            return sformat("byte %d (%s) outside a string", pos,
                (c > 32 and c < 127) and "'" .. ssub(text, pos, pos) .. "'" or "code " .. c)
        end
        if body then  -- to the first closing bracket of its level, as Lua 5.1 reads it
            local close = sfind(text, "]" .. eq .. "]", body, true)
            if close == nil then return "an unfinished long bracket at byte " .. pos end
            if eq == "" and sfind(ssub(text, body, close - 1), "[[", 1, true) then
                return "[[ inside [[...]] at byte " .. pos
            end
            pos = close + #eq + 2
        end
    end
end

local function device_count(v)
    return type(v) == "number" and v >= 0 and v <= MAX_DEVICES and floor(v) == v
end

-- The snapshot's data checked: { generated_at, pools = { key = clean copy } } and the list
-- of the pools left out ("key (why)"), or nil and why.
local function check_snapshot(data)
    if type(data) ~= "table" or type(data.pools) ~= "table" then
        return nil, "not a table with pools"
    end
    local at = data.generated_at
    if type(at) ~= "number" or at ~= at or at == HUGE or at == -HUGE then
        return nil, "generated_at is not a time"
    end
    local pools, bad = {}, {}
    for key, p in pairs(data.pools) do
        local why = nil
        if type(key) ~= "string" then
            why = "its key is not a string"
        elseif type(p) ~= "table" then
            why = "not a table"
        else
            for _, f in ipairs(POOL_FIELDS) do
                local v = p[f]
                if why == nil and not device_count(v) then
                    why = f .. " is " .. (type(v) == "number" and "not a device count" or type(v))
                end
            end
            if why == nil and (p.free > p.total or p.free_max_node > p.free) then
                why = "more devices free than there are"
            end
        end
        local fit = nil
        if why == nil then fit = p.fit end
        if fit ~= nil then  -- a copy of entries 1..n: no hole, nothing but two counts each
            local n, clean = min(p.free_max_node, FIT_MAX), {}
            if type(fit) ~= "table" then
                why = "fit is " .. type(fit)
            end
            for k = 1, why == nil and n or 0 do
                local e = fit[k]
                if type(e) ~= "table" or not device_count(e[1]) or not device_count(e[2]) then
                    why = "fit entry " .. k .. " is not two counts"
                    break
                end
                clean[k] = { e[1], e[2] }
            end
            if why == nil and fit[n + 1] ~= nil then why = "fit has more entries than " .. n end
            fit = clean
        end
        if why then
            bad[#bad + 1] = shown(tostring(key)) .. " (" .. why .. ")"
        else
            pools[key] = { total = p.total, free = p.free, free_max_node = p.free_max_node,
                           pending = p.pending, fit = fit }
        end
    end
    tsort(bad)
    return { generated_at = at, pools = pools }, bad
end

-- A data file's chunk (the text after its generation line) run as data: the value it
-- returns, or nil and why. Any data file the bridge loads goes through here, each with a
-- byte cap of its own.
local function load_data(text, name, max_bytes)
    if #text > max_bytes then return nil, "larger than " .. max_bytes .. " bytes" end
    local why = not_data(text)
    if why then return nil, "not data: " .. why end
    local chunk, err = loadstring(text, "=" .. name)
    if chunk == nil then return nil, tostring(err) end
    setfenv(chunk, {})  -- the chunk sees no functions at all
    local ok, data
    local hook = debug and debug.sethook
    if hook then  -- and runs a bounded number of instructions (belt and braces)
        local h, mask, count = debug.gethook()
        hook(function() error("runs too long", 0) end, "", SNAPSHOT_INSTRUCTIONS)
        ok, data = pcall(chunk)
        if h then hook(h, mask, count) else hook() end
    else
        ok, data = pcall(chunk)
    end
    if not ok then return nil, tostring(data) end
    return data
end

-- The snapshot's chunk loaded and checked: like check_snapshot.
local function load_snapshot(text)
    local data, why = load_data(text, "snapshot", SNAPSHOT_MAX_BYTES)
    if why then return nil, why end
    return check_snapshot(data)
end

local snap = { checked = -1, gen = nil, data = nil, problem = nil, state = nil }
-- Devices this slurmctld handed out per pool since the snapshot was written: a burst of
-- submissions between two snapshots must not all land on the pool that looked free. Of
-- those sent to start now, the devices, CPUs and memory too, for the pools' fit (choose).
local placed, placed_now, placed_cpus, placed_mem = {}, {}, {}, {}

local function note_snapshot(state, detail)
    if snap.state ~= state then  -- one log line per change, not per job
        snap.state = state
        slurm.log_info("slurm-hetero: capacity snapshot %s%s", state, detail or "")
    end
end

local function read_snapshot()
    local f = SNAPSHOT_PATH and io.open(SNAPSHOT_PATH, "r")
    if not f then
        snap.data, snap.gen, snap.problem = nil, nil, nil
        return
    end
    -- Bounded reads only ("*l" and "*a" would take a line or a file of any length).
    local head = f:read(SNAPSHOT_HEAD_BYTES) or ""
    local gen, body = smatch(head, "^%-%- hetero%-snapshot (%d+)[^\n]*\n()")
    if gen == nil then
        snap.data, snap.gen, snap.problem = nil, nil, "no generation line"
    elseif gen ~= snap.gen then  -- a new generation: loaded and checked once
        snap.gen = gen
        local rest = f:read(SNAPSHOT_MAX_BYTES + 1 - #head) or ""
        local data, bad
        if #head + #rest > SNAPSHOT_MAX_BYTES then
            bad = "larger than " .. SNAPSHOT_MAX_BYTES .. " bytes"
        else
            data, bad = load_snapshot(ssub(head, body) .. rest)
        end
        if data == nil then  -- the last good one, if any, stays until it is stale
            snap.problem = bad
            if snap.data then
                slurm.log_error("slurm-hetero: capacity snapshot %s rejected (%s): the previous one applies until stale",
                    SNAPSHOT_PATH, shown(tostring(bad)))
            end
        else
            snap.data, snap.problem = data, nil
            placed, placed_now, placed_cpus, placed_mem = {}, {}, {}, {}  -- the new one counts them
            if #bad > 0 then
                slurm.log_error("slurm-hetero: capacity snapshot %s: %d pool(s) left out: %s%s",
                    SNAPSHOT_PATH, #bad, tconcat(bad, ", ", 1, min(#bad, 5)),
                    #bad > 5 and ", ..." or "")
            end
        end
    end
    f:close()
end

-- The snapshot's data when it is fresh (else nil; a stale one's stays in snap.data) and its
-- age in seconds (nil: none).
local function snapshot(now)
    if now - snap.checked >= SNAPSHOT_CHECK_S then
        snap.checked = now
        read_snapshot()
    end
    local data = snap.data
    if data == nil then
        if snap.problem then
            note_snapshot("unreadable", " (" .. tostring(SNAPSHOT_PATH) .. ": " .. shown(snap.problem) ..
                "): static order applies")
        else
            note_snapshot("missing", ": static order applies")
        end
        return nil, nil
    end
    local age = now - data.generated_at
    if age > SNAPSHOT_STALE_S then
        note_snapshot("stale", ": pools by its backlog and what was placed since")
        return nil, age
    end
    if age < -CLOCK_SKEW_S then
        note_snapshot("from the future", sformat(" (%d s ahead of this clock): static order applies",
            floor(-age)))
        return nil, age
    end
    note_snapshot("fresh")
    return data, age
end

-- ---- choosing a pool -----------------------------------------------------------------

local function in_list(list, item)
    for x in gmatch(list, "[^,]+") do
        if x == item then return true end
    end
    return false
end

local NO_VAL, NO_VAL16 = 4294967294, 65534  -- Slurm's "not set" for 32- and 16-bit job_desc fields
local function set16(v) return v ~= nil and v > 0 and v < NO_VAL16 end
local function set32(v) return v ~= nil and v > 0 and v < NO_VAL end

-- What one node must hold for the job, as far as the job says: CPUs (one task's, the per-node
-- minimum, tasks per node x CPUs per task, and a one-node job's whole count) and memory
-- (--mem, or --mem-per-cpu x those CPUs; nil: not said; WHOLE_NODE: --mem=0, which Slurm
-- gives all of a node's memory, so it starts only on a node with none allocated). Slurm
-- refuses a job that no node of its partition can hold ("Requested node configuration is not
-- available"; a held job waits forever), so pools whose nodes are smaller are no candidates.
-- Third: the CPUs of one task, for `job_cpus`.
local WHOLE_NODE = 0

local function node_need(job_desc)
    local per_task = job_desc.cpus_per_task
    if not set16(per_task) then per_task = 1 end
    local cpus = per_task
    if set16(job_desc.pn_min_cpus) then cpus = max(cpus, job_desc.pn_min_cpus) end
    if set16(job_desc.ntasks_per_node) then cpus = max(cpus, job_desc.ntasks_per_node * per_task) end
    if job_desc.max_nodes == 1 then
        local all = job_desc.min_cpus
        if not set32(all) then
            local tasks = job_desc.num_tasks
            if not set32(tasks) then tasks = 1 end
            all = tasks * per_task
        end
        cpus = max(cpus, all)
    end
    local mem = job_desc.min_mem_per_node
    if mem == nil then  -- not said (0 is said: --mem=0, WHOLE_NODE)
        local per_cpu = job_desc.min_mem_per_cpu
        mem = (per_cpu ~= nil and per_cpu > 0) and per_cpu * cpus or nil
    end
    return cpus, mem, per_task
end

-- The candidates of one decision, in tables reused from job to job (slurmctld runs the
-- bridge for one job at a time; nothing keeps them past decide): no garbage per candidate.
local cand_list, cand_recs = {}, {}

local function candidates(req, arch, partition, cpus, mem)
    local out, k = cand_list, 0
    for i, p in ipairs(POOLS) do
        local m = MODELS[p.model]
        if req.set[p.model] and (arch == "any" or arch == p.arch)
            and (req.mem == nil or m.mem_mib >= req.mem)
            and (p.cpus == nil or cpus <= p.cpus) and (mem == nil or p.mem_mib == nil or mem <= p.mem_mib) then
            local ok_part = partition == nil
            if not ok_part then
                for part in gmatch(partition, "[^,]+") do
                    if in_list(p.partitions, part) then ok_part = true end
                end
            end
            local n = req.n or max(1, ceil(req.units / m.units - 1e-9))
            if ok_part and n <= p.per_node then
                k = k + 1
                local c = cand_recs[k]
                if c == nil then c = {}; cand_recs[k] = c end
                c.pool, c.n, c.cost, c.order, c.now, c.backlog = p, n, n * m.units, i, false, HUGE
                out[k] = c
            end
        end
    end
    for j = k + 1, #out do out[j] = nil end
    return out
end

local function by_order(a, b) return a.order < b.order end  -- POOLS is in the static order
local function by_snapshot(a, b)
    if a.now ~= b.now then return a.now end
    if not a.now and a.backlog ~= b.backlog then return a.backlog < b.backlog end
    if a.cost ~= b.cost then return a.cost < b.cost end
    return a.order < b.order
end

-- With a fresh snapshot: pools where the job can start now come first, cheapest (fewest
-- normalized units) first; then the others by shortest backlog (pending + placed since +
-- requested - free devices, per device of the pool; placed: what this slurmctld handed out
-- since the snapshot). Where the snapshot keeps the pool's fit, "now" also needs one node
-- with the job's CPUs and memory free (a device free beside busy cores starts nothing), as a
-- lower bound after the jobs sent there to start since: a node that had n + k devices free
-- still has n, less at most their CPUs and memory. Where no node has room for the job, the
-- pool's free devices shorten no backlog for it either; by the snapshot's own fit, or by
-- the lower bound where one node held every free device (so the jobs since went there).
-- With a stale one (the daemon stopped, or cannot write): no pool is taken to start it now,
-- the rest as above; what was placed since keeps adding to each pool's backlog, so an
-- outage's jobs spread over the pools by their size instead of all queueing behind the
-- smallest model (the fault soak: nine pods waited a whole day in a one-node pool). Without
-- one (none yet, unreadable, from the future): the static order.
local function room_for(room, cpus, mem, pc, pm)
    return room ~= nil and room[1] - pc >= cpus and (mem == nil or room[2] - pm >= mem)
end

-- The memory a job takes on one node of pool `p` (WHOLE_NODE: the node's, as far as the site
-- says; nil where it does not).
local function mem_on(p, mem)
    if mem == WHOLE_NODE then return p.mem_mib end
    return mem
end

local function choose(cands, data, stale, cpus, mem)
    local d = data or stale
    for _, c in ipairs(cands) do
        local s = d and d.pools[c.pool.key]
        if s then
            local key, fit, need = c.pool.key, s.fit, mem_on(c.pool, mem)
            local placed_n = placed[key] or 0
            local now = data ~= nil and min(s.free_max_node, s.free - placed_n) >= c.n and s.pending == 0
            local usable = s.free  -- the free devices that count for its backlog
            if fit then
                local bound = room_for(fit[c.n + (placed_now[key] or 0)], cpus, need,
                                       placed_cpus[key] or 0, placed_mem[key] or 0)
                now = now and bound
                if s.free_max_node >= s.free then  -- one node holds them all: the bound is exact
                    if not bound then usable = 0 end
                elseif not room_for(fit[c.n], cpus, need, 0, 0) then
                    usable = 0
                end
            end
            c.now = now
            c.backlog = (s.pending + placed_n + c.n - usable) / max(s.total, 1)
        else
            c.now, c.backlog = false, HUGE
        end
    end
    tsort(cands, d and by_snapshot or by_order)
    local best = cands[1]
    if d == nil then return best, "static" end
    if data == nil then return best, "stale-backlog" end
    return best, best.now and "starts-now" or "least-backlog"
end

-- Pieces of the decision record that repeat from job to job, written once: '"key":"value"'
-- for values the site's tables bound (arch, tier, policy, why), and per pool and count the
-- pool, model, count and units. Never for user text (a folder, say): that stays per job.
local pieces = {}
local function piece(key, value)
    local by = pieces[key]
    if by == nil then by = {}; pieces[key] = by end
    local text = by[value]
    if text == nil then text = '"' .. key .. '":' .. json_string(value); by[value] = text end
    return text
end

-- Whole numbers as text, each made once. Lua turns a number into text with
-- snprintf("%.14g"), whose floating-point path is the largest piece of C code a decision
-- would otherwise run, and a cold one in slurmctld at every job. Kept for 0..65536.
local INT_TEXT = {}
local function itext(n)
    local s = INT_TEXT[n]
    if s == nil then
        s = sformat("%d", n)
        if n >= 0 and n <= 65536 and n == floor(n) then INT_TEXT[n] = s end
    end
    return s
end

-- What a decision writes for a pool and a count, made once per pool and count (n is at most
-- the pool's devices per node): its record piece, its entry in "cands", its GRES (typed, and
-- untyped for a movable job).
local pool_texts = {}
local function pool_text(c)
    local by = pool_texts[c.pool]
    if by == nil then by = {}; pool_texts[c.pool] = by end
    local t = by[c.n]
    if t == nil then
        local m, n = MODELS[c.pool.model], itext(c.n)
        t = { piece = piece("pool", c.pool.key) .. "," .. piece("model", c.pool.model) .. ',"n":' .. n ..
                  ',"units":' .. sformat("%.2f", c.cost),
              alt = c.pool.key .. ":" .. n,
              tres = GRES_PREFIX .. m.gres .. ":" .. m.type .. ":" .. n,
              untyped = GRES_PREFIX .. m.gres .. ":" .. n }
        by[c.n] = t
    end
    return t
end

-- ---- containers: --image=NAME[:TAG] → the job's OCI bundle ------------------
-- Slurm gets a stub bundle per image; the wrapper in oci.conf runs the variant for the
-- node's arch and stack. Here: the image exists and has a variant for the arch and stack
-- the job asks for; when only one arch fits, the job is narrowed to it. Mount requests
-- outside the admin's allowlist are refused here already (the node checks again).
local IMAGE_BY_PATH = {}
for ref, img in pairs(IMAGES) do IMAGE_BY_PATH[img.path] = ref end

-- The accelerator stack a GRES request implies (nil: none, or not known here).
local function request_stack(tres)
    if tres == nil then return nil end
    for item in gmatch(tres, "[^,]+") do
        local name, typ = smatch(item, "^gres[:/]([%w_%-]+):([^:]+):%d+$")
        local stack = name and GRES_STACKS[name .. ":" .. typ]
        if stack == nil then
            name = smatch(item, "^gres[:/]([%w_%-]+)")
            stack = name and GRES_STACKS[name]
        end
        if stack then return stack end
    end
    return nil
end

local function mount_allowed(src, rw)
    if ssub(src, 1, 1) ~= "/" or sfind(src .. "/", "/%.%./") then return false end
    for _, m in ipairs(MOUNT_ALLOW) do
        if m.source == "/" or src == m.source or ssub(src, 1, #m.source + 1) == m.source .. "/" then
            return (not rw) or m.mode == "rw"
        end
    end
    return false
end

local function mounts_problem(value)
    for item in gmatch(value, "[^,]+") do
        if not mount_allowed(smatch(item, "^([^:]*)"), ssub(item, -3) == ":rw") then
            local allowed = {}
            for _, m in ipairs(MOUNT_ALLOW) do allowed[#allowed + 1] = m.source .. " (" .. m.mode .. ")" end
            return "hetero: " .. MOUNTS_VAR .. "=" .. shown(value) .. ": " .. shown(item) ..
                " is outside the site's mount allowlist (allowed: " ..
                (#allowed > 0 and tconcat(allowed, ", ") or "none") .. ")"
        end
    end
    return nil
end

-- { ref, path, arch } for a job with --image or --container, or nil and the rejection.
local function container_for(job_desc, image, arch, tres)
    local option, given, ref = "container", job_desc.container, nil
    local bypath = job_desc.container and IMAGE_BY_PATH[(gsub(job_desc.container, "/+$", ""))]
    if image then
        option, given = "image", image
        local _, why = image_syntax(image)
        if why then
            return reject("image", image, why .. (next(IMAGES) and ("; this site has: " ..
                sorted_keys(IMAGES)) or ""))
        end
        ref = sfind(image, ":", 1, true) and image or (IMAGE_TAGS[image] and image .. ":" .. IMAGE_TAGS[image])
        if ref == nil or IMAGES[ref] == nil then
            return reject("image", image, next(IMAGES) and ("unknown image; this site has: " ..
                sorted_keys(IMAGES)) or "this site has no image catalog")
        end
        if job_desc.container ~= nil and bypath ~= ref then
            return reject("image", image, "conflicts with --container; give one of them")
        end
        if job_desc.script == nil and job_desc.container == nil then
            -- srun/salloc: Slurm takes a step's container from the step, not from the job.
            return reject("image", image, "srun and salloc start containers per step: use " ..
                "--container=" .. IMAGES[ref].path .. " (or sbatch --image)")
        end
    else
        ref = bypath
        if ref == nil then
            return reject("container", given, "not an image of this site; use --image=NAME:TAG " ..
                "(this site has: " .. sorted_keys(IMAGES) .. ")")
        end
    end
    local stack = request_stack(tres)
    local arches, n = {}, 0
    for _, v in ipairs(IMAGES[ref].variants) do
        local va, vs = smatch(v, "^([^/]+)/(.+)$")
        if (arch == "any" or va == arch) and (stack == nil or vs == stack) and not arches[va] then
            arches[va], n = true, n + 1
        end
    end
    if n == 0 then
        local need = (arch == "any" and stack) or (stack and arch .. "/" .. stack) or arch
        return reject(option, given, "image " .. ref .. " has no " .. need .. " variant; it has: " ..
            tconcat(IMAGES[ref].variants, ", "))
    end
    if arch == "any" and n == 1 then arch = next(arches) end
    local mounts = job_desc.environment and job_desc.environment[MOUNTS_VAR]
    local problem = mounts and mounts_problem(mounts)
    if problem then return nil, problem end
    return { ref = ref, path = IMAGES[ref].path, arch = arch }
end

-- A job without hetero options but with --container: only images of the catalog run.
local function plain_container(job_desc, tres)
    if next(IMAGES) == nil or job_desc.container == nil then return {} end
    local c, err = container_for(job_desc, nil, "any", tres)
    if c == nil then return nil, err end
    local set = { container = c.path }
    if c.arch ~= "any" then
        set.features = job_desc.features and ("(" .. job_desc.features .. ")&" .. c.arch) or c.arch
    end
    return set
end
-- ---- end of containers ----------------------------------------------------------------

-- ---- the decision: computed fully, then applied (nothing half-done on error) ---------

-- partition and tres: the job's (partition possibly routed), read once by the caller.
local function decide(job_desc, opts, now, partition, tres)
    for _, name in ipairs(OPTION_NAMES) do
        local v = opts[name]
        if v ~= nil and not FLAGS[name] and not printable(v) then return reject(name, v, NOT_PRINTABLE) end
    end
    local set, record = {}, {}
    local arch = "any"
    if opts.arch then
        local a, why = arch_syntax(opts.arch)
        if a == nil then return reject("arch", opts.arch, why) end
        arch = a.arch
        record[#record + 1] = piece("arch", arch)
    end
    if opts.tier then
        local t = name_syntax(opts.tier, TIERS)
        if t == nil then return reject("tier", opts.tier, "use one of " .. sorted_keys(TIERS)) end
        local tier = t.name
        if job_desc.qos ~= nil and job_desc.qos ~= tier then
            return reject("tier", opts.tier, "conflicts with --qos=" .. shown(job_desc.qos) ..
                "; give one of them")
        end
        set.qos = tier
        record[#record + 1] = piece("tier", tier)
    end
    local energy
    if opts.energy then
        local e = name_syntax(opts.energy, ENERGY)
        if e == nil then return reject("energy", opts.energy, "use one of " .. sorted_keys(ENERGY)) end
        energy = e.name
        set.cpu_freq_gov = ENERGY[energy].cpu_freq_gov
        record[#record + 1] = piece("energy", energy)
        if energy == "auto" then record[#record + 1] = '"energy_rule":"no history: balanced"' end
    end
    local gpu_job = tres ~= nil and sfind(tres, "gpu", 1, true)
    local place  -- a movable job's model (a floating job's models), pinned by node feature
    if opts.accel then
        if tres ~= nil then
            return reject("accel", opts.accel, "conflicts with --gres/--gpus; give one of them")
        end
        local req, err = parse_accel(opts.accel)
        if req == nil then return nil, err end
        local cpus, mem = node_need(job_desc)
        local cands = candidates(req, arch, partition, cpus, mem)
        if #cands == 0 then
            local size = ""  -- said when the nodes' size is what ruled every pool out
            if #candidates(req, arch, partition, 1, nil) > 0 then
                local m = mem ~= WHOLE_NODE and mem
                size = " with " .. itext(cpus) .. " CPUs" .. (m and (" and " .. itext(m) .. " MiB") or "") ..
                    " on one node"
            end
            return reject("accel", opts.accel, "no pool of this site satisfies it" ..
                (arch ~= "any" and (" on " .. arch) or "") ..
                (partition and (" in partition " .. shown(partition)) or "") .. size)
        end
        local data, age = snapshot(now)
        local stale = data == nil and snap.state == "stale" and snap.data or nil
        local best, why = choose(cands, data, stale, cpus, mem)
        if data or stale then
            local key = best.pool.key
            placed[key] = (placed[key] or 0) + best.n
            if best.now then  -- a queued job takes no node's CPUs yet
                placed_now[key] = (placed_now[key] or 0) + best.n
                placed_cpus[key] = (placed_cpus[key] or 0) + cpus
                placed_mem[key] = (placed_mem[key] or 0) + (mem_on(best.pool, mem) or 0)
            end
        end
        local m, texts = MODELS[best.pool.model], pool_text(best)
        set.tres_per_node = texts.tres
        arch = best.pool.arch
        if partition == nil then set.partition = best.pool.partitions end
        gpu_job = m.gres == "gpu"
        record[#record + 1] = req.json
        record[#record + 1] = texts.piece
        record[#record + 1] = piece("why", why)
        record[#record + 1] = '"candidates":' .. itext(#cands)
        -- `--mem=0` (a node's whole memory), which squeue shows as 0 like no memory at all:
        -- the daemon's moves read it here (bridge/migrate.node_mem).
        if mem == WHOLE_NODE then record[#record + 1] = '"mem":"node"' end
        -- Every pool that satisfies the request ("pool:n", best first): the daemon may move
        -- the pending job between them (pool keys are catalog ids and arch names: no quoting).
        local alts = {}
        for i, c in ipairs(cands) do alts[i] = pool_text(c).alt end
        record[#record + 1] = '"cands":"' .. tconcat(alts, ",") .. '"'
        -- Floating or movable jobs ask for untyped GRES with the model(s) in their features;
        -- not for an image's job, nor a tier with per-model limits: Slurm counts those only on
        -- typed requests (an untyped gres:gpu:2 passes a tier's gres/gpu:v100=2 cap: seen on
        -- 22.05). Only on such sites: the checks read slurmctld's fields, the common path none.
        local reshape = (FLOAT or MIGRATE) and #cands > 1 and not opts.image and job_desc.container == nil
            and not LIMITED_TIERS[set.qos or job_desc.qos or DEFAULT_TIER]
        -- Floating: the pools of the same arch, GRES kind, partitions and device count as the
        -- chosen one are equal offers for this request, so the job asks Slurm for any of them
        -- (untyped GRES, the models' node features ORed, best first) and starts in whichever
        -- frees first: the choice at submit only guesses which one that is. A job that runs on
        -- one node (-N 1, or one task) gets a plain OR, which Slurm's scheduler and backfill
        -- test in one pass; one that might span nodes a matching OR ([a|b]: every node of one
        -- model), which they test once per model. Not for a job with a constraint of its own
        -- (an expression is not rewritten), one asking for several nodes by count, nor a
        -- --migratable one (the daemon may move it while it runs: it keeps the movable shape).
        if FLOAT and reshape and job_desc.features == nil and not opts.migratable
            and not (set32(job_desc.min_nodes) and job_desc.min_nodes > 1)
            and not (set32(job_desc.max_nodes) and job_desc.max_nodes > 1) then
            local models, keys = {}, {}
            for _, c in ipairs(cands) do
                local p = c.pool
                if c.n == best.n and p.arch == best.pool.arch and MODELS[p.model].gres == m.gres
                    and (partition ~= nil or p.partitions == best.pool.partitions) then
                    models[#models + 1], keys[#keys + 1] = p.model, p.key
                end
            end
            if #models > 1 then
                set.tres_per_node = texts.untyped
                -- One node for sure: -N 1, or one task and no node list (-w names nodes it gets all of).
                local one = job_desc.max_nodes == 1 or
                    (not (set32(job_desc.num_tasks) and job_desc.num_tasks > 1) and job_desc.req_nodes == nil)
                place = (one and "(" or "[") .. tconcat(models, "|") .. (one and ")" or "]")
                record[#record + 1] = '"float":"' .. tconcat(keys, ",") .. '"'
                reshape = false  -- it needs no moving
            end
        end
        -- Movable: Slurm 22.05 cannot change the GRES type of a pending job, so where the
        -- daemon may move jobs the GRES stays untyped and the model's node feature pins it
        -- (a move rewrites the feature; Slurm still allocates and accounts typed devices).
        if MIGRATE and reshape then
            set.tres_per_node = texts.untyped
            place = best.pool.model
            record[#record + 1] = '"movable":true'
        end
        if age then record[#record + 1] = '"snapshot_age":' .. itext(floor(age)) end
    end
    if energy and gpu_job and ENERGY[energy].gpu_freq then
        set.tres_freq = "gpu:" .. ENERGY[energy].gpu_freq
    end
    if opts.image or (next(IMAGES) and job_desc.container) then  -- containers
        local c, cerr = container_for(job_desc, opts.image, arch, set.tres_per_node or tres)
        if c == nil then return nil, cerr end
        set.container, arch = c.path, c.arch
        record[#record + 1] = '"image":' .. json_string(c.ref)
    end
    if arch ~= "any" then
        local where = place and (arch .. "&" .. place) or arch
        set.features = job_desc.features and ("(" .. job_desc.features .. ")&" .. where) or where
    end
    -- Checkpointed jobs come back: requeue on preemption or node failure. How Slurm 22.05
    -- tells a job under preempt/qos with a GraceTime (src/slurmctld/preempt.c
    -- _job_check_grace_internal, job_mgr.c job_signal/_signal_job, slurmd req.c
    -- _kill_all_active_steps): at preemption slurmctld sends SIGCONT then SIGTERM with no
    -- flags, which becomes KILL_STEPS_ONLY: only the job's steps (srun) get SIGTERM, NOT the
    -- batch shell. Only with PreemptParameters=send_user_signal and the job's own
    -- --signal=[B:]SIG does it send that signal instead (B: the batch shell, else the
    -- steps). When GraceTime ends the job is requeued or cancelled through the normal kill:
    -- SIGCONT, SIGTERM to every process including the batch shell, KillWait, SIGKILL. So a
    -- job script that checkpoints itself must run its work under srun, or trap a --signal=B:
    -- signal, to save within GraceTime.
    if opts.checkpoint then
        local c, why = checkpoint_syntax(opts.checkpoint)
        if c == nil then return reject("checkpoint", opts.checkpoint, why) end
        if job_desc.requeue == 0 then  -- an explicit --no-requeue (unset is NO_VAL16)
            return reject("checkpoint", opts.checkpoint, "conflicts with --no-requeue; give one of them")
        end
        set.requeue = 1
        record[#record + 1] = '"checkpoint":' .. json_string(c.path)
    end
    if opts.migratable then
        local _, why = migratable_syntax(opts.migratable)
        if why then return reject("migratable", opts.migratable, why) end
        if opts.checkpoint == nil then
            return nil, "hetero: --migratable needs --checkpoint=DIR: give both options"
        end
        record[#record + 1] = '"migratable":true'
    end
    return set, nil, record  -- the caller writes the record (with the prediction) once
end

-- ---- runtime prediction (compiled-in model) and backfill mode -----------------------------
-- With a model, every job's prediction (central and upper quantile, seconds) goes into the
-- admin comment. In partitions in backfill mode, while the bridge daemon's heartbeat (the
-- snapshot) is fresh, the job's limit becomes the upper quantile so backfill can plan with
-- it; the user's own limit is kept in the comment and the daemon extends the limit before
-- it runs out, finally to the user's limit: no job is killed earlier than its user asked.
local MODEL = nil
if MODEL_LUA ~= nil then
    local chunk, err = loadstring(MODEL_LUA, "predict")
    if chunk then
        setfenv(chunk, { math = math, string = string, tonumber = tonumber, tostring = tostring,
                         ipairs = ipairs, unpack = unpack })
        local ok, m = pcall(chunk)
        if ok and type(m) == "table" and type(m.predict) == "function" then MODEL = m else err = m end
    end
    if MODEL == nil then slurm.log_error("slurm-hetero: runtime model not loaded: %s", tostring(err)) end
end

-- ---- the users' history online (slurm_hetero/bridge/history.py) ----------------------
-- The bridge daemon writes it beside the snapshot, atomically:
--   -- hetero-history GENERATION
--   return { generated_at = EPOCH_S, history_until = EPOCH_S, nstate = N,
--            users = { ["name"] = { N numbers, STATE order }, ... } }
-- Checked at most every HISTORY_CHECK_S s (one comparison per job otherwise), loaded only
-- when GENERATION changed, as data only under a byte cap of its own (load_data), then entry
-- by entry: a user name of what useradd and directories allow and exactly the model's N
-- finite numbers, or that entry is skipped (one log line per load). A file whose base is
-- older than the model's own history (a daemon still on the last export) or that fails
-- whole leaves the last good one in place. The model reads it before its exported history.
local HISTORY_PATH = site("HISTORY_PATH", nil)  -- nil: none, the exported history alone
local HISTORY_CHECK_S = 10
local HISTORY_MAX_BYTES = 2097152  -- the daemon writes at most 5,000 users, ~0.9 MiB
local HISTORY_MAX_USERS = 5000
local hist = { checked = -HUGE, gen = nil }

-- (users, number of entries skipped) from a loaded history file, or nil and why.
local function check_history(data, nstate, model_until)
    if type(data) ~= "table" or type(data.users) ~= "table" then return nil, "no users table" end
    if data.nstate ~= nstate then
        return nil, sformat("entries of %s numbers, the model's have %d", tostring(data.nstate), nstate)
    end
    local base = data.history_until
    if type(model_until) == "number" and not (type(base) == "number" and base >= model_until) then
        return nil, "based on history older than the model's"
    end
    local users, n, bad = {}, 0, 0
    for name, s in pairs(data.users) do
        local ok = type(name) == "string" and #name > 0 and #name <= 64 and not sfind(name, "[^%w._@$-]")
            and type(s) == "table" and #s == nstate and n < HISTORY_MAX_USERS
        for i = 1, ok and nstate or 0 do
            local v = s[i]
            if type(v) ~= "number" or v ~= v or v == HUGE or v == -HUGE then ok = false; break end
        end
        if ok then users[name], n = s, n + 1 else bad = bad + 1 end
    end
    return users, bad
end

local function read_history(now)
    if now - hist.checked < HISTORY_CHECK_S then return end
    hist.checked = now
    local f = HISTORY_PATH and io.open(HISTORY_PATH, "r")
    if not f then return end  -- none yet, or gone: the last good one stays
    local head = f:read(SNAPSHOT_HEAD_BYTES) or ""
    local gen, body = smatch(head, "^%-%- hetero%-history (%d+)[^\n]*\n()")
    if gen and gen ~= hist.gen then
        hist.gen = gen
        local rest = f:read(HISTORY_MAX_BYTES + 1 - #head) or ""
        local data, users, why
        if #head + #rest > HISTORY_MAX_BYTES then
            why = "larger than " .. HISTORY_MAX_BYTES .. " bytes"
        else
            data, why = load_data(ssub(head, body) .. rest, "history", HISTORY_MAX_BYTES)
        end
        if data ~= nil then users, why = check_history(data, MODEL.nstate, MODEL.history_until) end
        if users == nil then
            slurm.log_error("slurm-hetero: users' history %s rejected (%s): the last one applies",
                HISTORY_PATH, shown(tostring(why)))
        else
            MODEL.set_overlay(users)
            if why > 0 then
                slurm.log_error("slurm-hetero: users' history %s: %d entr%s skipped", HISTORY_PATH, why,
                    why == 1 and "y" or "ies")
            end
        end
    end
    f:close()
end

local LOG_HORIZON = SITE_FACTOR and log(1 + SITE_FACTOR.horizon_min)  -- once, not per job
local function site_factor(p50_s)
    local short = 1 - log(1 + max(p50_s, 0) / 60) / LOG_HORIZON
    local raw = SITE_FACTOR.cap * max(0, min(1, short))
    return min(SITE_FACTOR.cap, SITE_FACTOR.step * floor(raw / SITE_FACTOR.step + 0.5))
end

-- The CPUs of the whole job (every node's), as far as it says: what `--order area` weighs
-- its prediction by.
local function job_cpus(job_desc)
    local per_node, _, per_task = node_need(job_desc)
    local cpus = set32(job_desc.num_tasks) and job_desc.num_tasks * per_task or per_task
    if set32(job_desc.min_cpus) then cpus = max(cpus, job_desc.min_cpus) end
    if set32(job_desc.min_nodes) then cpus = max(cpus, job_desc.min_nodes * per_node) end
    return cpus
end

local function first_partition(list)
    return list and smatch(list, "^[^,]+")
end

local function add_prediction(job_desc, set, now, job_partition, tres, record)
    local partition = first_partition(set.partition or job_partition) or DEFAULT_PARTITION
    local user_min = set.time_limit or job_desc.time_limit
    if user_min == nil or user_min >= NO_VAL or user_min == 0 then user_min = PARTITION_LIMITS[partition] end
    if MODEL.nstate then read_history(now) end
    -- The job as it will be: our changes over the user's request, the limit it will get.
    local p50, p90
    if MODEL.predict_desc_as then
        p50, p90 = MODEL.predict_desc_as(job_desc, now, partition, user_min or NO_VAL,
            set.tres_per_node or tres, set.partition or job_partition)
    else  -- a model exported before predict_desc_as: the same through a view
        local view = setmetatable({ time_limit = user_min or NO_VAL, tres_per_node = set.tres_per_node or tres,
                                    partition = set.partition or job_partition }, { __index = job_desc })
        p50, p90 = MODEL.predict_desc(view, now, partition)
    end
    local pred = sformat('"pred":{"p50":%d,"p90":%d}', ceil(p50), ceil(p90))
    -- The job's first SiteFactor, as the daemon computes it (slurm_hetero/jobs/sitefactor.py)
    -- at no wait: set here, it costs slurmctld no update RPC per new job; "sf" tells the
    -- daemon what the job holds.
    if SITE_FACTOR then
        -- `model export --order upper`: ordered by the upper quantile; `--order area`: by the
        -- p50 times the job's CPUs (CPU seconds). The daemon is told that basis ("sf_s") so
        -- that it keeps the same order as the job waits.
        local order = MODEL.order
        local basis = ceil(p50)
        if order == "upper" then basis = ceil(p90)
        elseif order == "area" then basis = basis * job_cpus(job_desc) end
        local sf = site_factor(basis)
        set.site_factor = sf
        pred = pred .. ',"sf":' .. itext(sf)
        if order == "upper" or order == "area" then pred = pred .. ',"sf_s":' .. itext(basis) end
    end
    -- The heartbeat matters only where limits may be shortened: no snapshot look-up otherwise.
    if PREDICTED_LIMITS[partition] and user_min and snapshot(now) then
        -- The limit backfill plans with: the upper quantile, or (`model export --limit
        -- central`) the central prediction, extended when a job outlives it.
        local planned = MODEL.limit == "central" and p50 or p90
        local short = max(1, ceil(planned / 60))
        -- `model export --shorten-when-sure`: a job whose p90 is near its user's limit (the
        -- model is unsure of it) keeps that limit; a short guess would let a long job backfill
        -- into the holes the short jobs behind it need, then be extended again and again.
        local sure = MODEL.sure
        if short < user_min and (type(sure) ~= "number" or p90 <= sure * user_min * 60) then
            set.time_limit = short
            pred = pred .. ',"shortened":true,"user_limit_min":' .. itext(user_min)
            -- How the daemon extends it when it outlives the prediction, if not by doubling.
            if MODEL.correction == "tsafrir" then pred = pred .. ',"ext":"tsafrir"' end
        end
    end
    record[#record + 1] = pred
end

-- A plain GRES request (tres) without a partition: the partitions that have that GRES (nil:
-- none).
local function route_plain(tres)
    for item in gmatch(tres, "[^,]+") do
        local name = smatch(item, "^gres[:/]([%w_-]+)")
        if name ~= nil and GRES_PARTITIONS[name] ~= nil then return GRES_PARTITIONS[name] end
    end
    return nil
end

-- Each job_desc field read is a C call in slurmctld (the name looked up among ~130 fields,
-- the value copied): the ones used throughout are read once here and passed on.
local function submit(job_desc)
    local opts = read_options(job_desc)
    local partition, tres = job_desc.partition, job_desc.tres_per_node
    -- A plain --gres request is routed with hetero options too (e.g. --image with --gres=npu:1):
    -- the rest of the decision sees the routed partition, which is applied with it.
    local routed = partition == nil and tres ~= nil and route_plain(tres) or nil
    partition = partition or routed
    local now = os.time()
    local set, err, record
    if opts == nil then
        set, err = plain_container(job_desc, tres)
    else
        set, err, record = decide(job_desc, opts, now, partition, tres)
    end
    if set == nil then return nil, err end
    if routed and set.partition == nil then set.partition = routed end
    if MODEL ~= nil then
        record = record or {}
        local pok, perr = pcall(add_prediction, job_desc, set, now, partition, tres, record)
        if not pok then  -- a failed prediction must not undo the rest of the decision
            slurm.log_error("slurm-hetero: runtime prediction failed: %s", tostring(perr))
        end
    end
    -- The decision record, written once: a job with hetero options or a prediction has one.
    if record and #record > 0 then
        set.admin_comment = '{"hetero":1,' .. tconcat(record, ",") .. "}"
    elseif opts ~= nil then
        set.admin_comment = '{"hetero":1}'
    end
    return set
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local ok, set, err = pcall(submit, job_desc)
    if not ok then
        slurm.log_error("slurm-hetero: internal error, job passed unchanged: %s", tostring(set))
        return slurm.SUCCESS
    end
    if set == nil then
        slurm.log_user("%s", err)
        return slurm.ERROR
    end
    -- Our record goes after what an admin (or an earlier plugin) put in the comment, which
    -- stays as it is (slurm/comment.py reads the last {"hetero": object as ours).
    local prior = set.admin_comment and job_desc.admin_comment
    if prior ~= nil and prior ~= "" then set.admin_comment = prior .. " " .. set.admin_comment end
    for field, value in pairs(set) do
        job_desc[field] = value
    end
    -- --tier: the user sees at submit what the tier allows (preemption, grace, minimum run).
    local note = set.qos and TIER_NOTES[set.qos]
    if note then slurm.log_user("%s", note) end
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end

-- For tests (tests/lua): the grammar, as the SPANK plugin's, and the snapshot checks.
return {
    accel = accel_syntax, arch = arch_syntax, energy = name_syntax, tier = name_syntax,
    image = image_syntax, checkpoint = checkpoint_syntax, migratable = migratable_syntax,
    check_snapshot = check_snapshot, load_snapshot = load_snapshot, not_data = not_data,
}
