-- siterules.lua: the site's own job_submit.lua rules, run inside slurm-hetero's job_submit.lua.
-- Plain Lua 5.1, testable as it is.
--
-- slurmctld loads only one job_submit.lua. When the site file names the site's script
-- (slurm.job_submit.script), `conf render` appends this file verbatim, in a function called
-- after bridge.lua defined its slurm_job_submit / slurm_job_modify, with
--     { script = "/etc/slurm/job_submit.site.lua", order = "site-first" | "bridge-first" }
-- It loads the site's script ONCE, here (slurmctld re-loads job_submit.lua only when that
-- file's mtime changes: touch it after changing the site's script), in an environment of its
-- own, and replaces the two globals by a chain that calls the site's functions and the
-- bridge's in `order`. Returns the chain's functions for tests.
--
-- What each outcome means (the same as Slurm 22.05 gives the site's script on its own):
-- - The site's return code passes through: anything but slurm.SUCCESS rejects the job with
--   that code, the other side is not run. Its slurm.log_user / slurm.user_msg lines reach the
--   user as they always did (the site's script calls the real `slurm` table).
-- - A non-numeric return (nil included) counts as success; Slurm logs it and so do we.
-- - A Lua error inside the site's function: logged, and the job goes on as if it returned
--   success. slurmctld does exactly that with a job_submit.lua of its own (fail open).
-- - The script does not load (missing, syntax error, error or non-zero return while loading,
--   no slurm_job_submit): slurmctld's log says so at load, and every submission is rejected
--   with a line saying why; job modifications too, except root's (an administrator must
--   still be able to hold or cancel jobs). Failing closed, because the site's rules are
--   policy (accounts, partitions, limits): running jobs without them would drop that policy
--   with only a log line to show for it. Slurm itself refuses to start with a job_submit.lua
--   that does not load.

local RULES = ...
local type, pcall, tostring, rawget, setmetatable = type, pcall, tostring, rawget, setmetatable
local sformat = string.format
local bridge_submit, bridge_modify = slurm_job_submit, slurm_job_modify
local PATH, ORDER = RULES.script, RULES.order or "site-first"
local TAG = "slurm-hetero: site job_submit rules " .. tostring(PATH)

-- The site's script sees every global (slurm, string, os, ...) but defines its own in `env`:
-- its slurm_job_submit and helpers neither replace ours nor see them.
local env = setmetatable({}, { __index = _G })
local site_submit, site_modify, load_error

local chunk, err = loadfile(PATH)
if chunk == nil then
    load_error = tostring(err)
else
    setfenv(chunk, env)
    local ok, rc = pcall(chunk)
    if not ok then
        load_error = tostring(rc)
    elseif type(rc) == "number" and rc ~= slurm.SUCCESS then
        load_error = sformat("returned %s while loading", tostring(rc))
    elseif type(rawget(env, "slurm_job_submit")) ~= "function" then  -- not _G's: the bridge's
        load_error = "defines no function slurm_job_submit"
    else
        site_submit = rawget(env, "slurm_job_submit")
        -- Slurm insists on both functions; a script without slurm_job_modify lets modifications pass.
        site_modify = rawget(env, "slurm_job_modify")
        if type(site_modify) ~= "function" then site_modify = nil end
    end
end
if load_error then
    slurm.log_error("%s did not load: %s; every job submission is rejected until it does "
        .. "(fix it, then touch job_submit.lua)", TAG, load_error)
else
    slurm.log_info("%s loaded (%s)", TAG, ORDER)
end

-- One call of a site function: its code if it returned a number, SUCCESS otherwise.
local function call_site(fn, name, ...)
    local ok, rc = pcall(fn, ...)
    if not ok then
        slurm.log_error("%s: %s failed, job passed as Slurm would: %s", TAG, name, tostring(rc))
        return slurm.SUCCESS
    end
    if type(rc) ~= "number" then
        slurm.log_info("%s: %s: non-numeric return code", TAG, name)
        return slurm.SUCCESS
    end
    return rc
end

local function refused()
    slurm.log_user("job_submit: the site's job submission rules (%s) did not load, so no job "
        .. "is accepted: please tell the administrators", tostring(PATH))
    return slurm.ERROR
end

local function site_submit_call(...) return call_site(site_submit, "slurm_job_submit", ...) end
local function site_modify_call(...) return call_site(site_modify, "slurm_job_modify", ...) end

-- a, then b unless a did not return success.
local function both(a, b, ...)
    local rc = a(...)
    if rc ~= slurm.SUCCESS then return rc end
    return b(...)
end

local function chain_submit(job_desc, part_list, submit_uid)
    if load_error then return refused() end
    if ORDER == "bridge-first" then
        return both(bridge_submit, site_submit_call, job_desc, part_list, submit_uid)
    end
    return both(site_submit_call, bridge_submit, job_desc, part_list, submit_uid)
end

local function chain_modify(job_desc, job_rec, part_list, modify_uid)
    if load_error then
        if modify_uid == 0 then return slurm.SUCCESS end
        return refused()
    end
    if site_modify == nil then return bridge_modify(job_desc, job_rec, part_list, modify_uid) end
    if ORDER == "bridge-first" then
        return both(bridge_modify, site_modify_call, job_desc, job_rec, part_list, modify_uid)
    end
    return both(site_modify_call, bridge_modify, job_desc, job_rec, part_list, modify_uid)
end

slurm_job_submit, slurm_job_modify = chain_submit, chain_modify
return { submit = chain_submit, modify = chain_modify, load_error = load_error }
