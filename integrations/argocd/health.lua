-- Argo CD health check for objects driven by kfsm.
--
-- It reads what kfsm writes, as kstatus does: status.observedGeneration
-- and the Ready, Reconciling and Stalled conditions. It also reads the
-- kfsm.dev/paused annotation, which kstatus does not know.
--
--   deletionTimestamp set                  Progressing  (kstatus Terminating)
--   annotation kfsm.dev/paused "true"      Suspended    (kstatus ignores it)
--   no status.observedGeneration yet       Progressing  (kstatus Current)
--   generation not yet observed            Progressing  (kstatus InProgress)
--   Reconciling True                       Progressing  (kstatus InProgress)
--   Stalled True                           Degraded     (kstatus Failed)
--   Ready True, or no Ready condition      Healthy      (kstatus Current)
--   Ready False or Unknown                 Progressing  (kstatus InProgress)
--
-- Argo CD runs custom health checks without Lua's string library, so
-- this script only compares and joins strings.

local hs = {}
local metadata = obj.metadata or {}
local annotations = metadata.annotations or {}
local status = obj.status or {}
local conditions = status.conditions or {}
local paused = annotations["kfsm.dev/paused"] == "true"

local function find(type)
  for _, c in ipairs(conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

-- "Reason: message", or either alone.
local function describe(c)
  if c == nil then
    return ""
  end
  local reason = c.reason or ""
  local message = c.message or ""
  if reason == "" then
    return message
  end
  if message == "" then
    return reason
  end
  return reason .. ": " .. message
end

local ready = find("Ready")

if metadata.deletionTimestamp ~= nil and metadata.deletionTimestamp ~= "" then
  hs.status = "Progressing"
  if paused then
    hs.message = "Deleting, paused: the deletion path waits until annotation kfsm.dev/paused is removed"
  elseif ready ~= nil then
    hs.message = "Deleting: " .. describe(ready)
  else
    hs.message = "Deleting"
  end
  return hs
end

if paused then
  hs.status = "Suspended"
  hs.message = "Paused: no handler runs until annotation kfsm.dev/paused is removed"
  return hs
end

-- kfsm stamps observedGeneration on every object it reconciles.
if status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the object"
  return hs
end

if metadata.generation ~= nil and metadata.generation ~= status.observedGeneration then
  hs.status = "Progressing"
  hs.message = "Generation " .. tostring(metadata.generation) .. " not yet observed (status is of generation " .. tostring(status.observedGeneration) .. ")"
  return hs
end

-- In their order, as kstatus reads them; kfsm never sets both.
for _, c in ipairs(conditions) do
  if c.type == "Reconciling" and c.status == "True" then
    hs.status = "Progressing"
    if ready ~= nil then
      hs.message = describe(ready)
    else
      hs.message = describe(c)
    end
    return hs
  end
  if c.type == "Stalled" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = describe(c)
    return hs
  end
end

if ready ~= nil and (ready.status == "False" or ready.status == "Unknown") then
  hs.status = "Progressing"
  hs.message = describe(ready)
  return hs
end

hs.status = "Healthy"
hs.message = describe(ready)
return hs
