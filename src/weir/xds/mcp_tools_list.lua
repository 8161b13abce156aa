-- weir: tools/list responses filtered by the BackendMCPPolicy of their route (weir.xds.mcp_list).
--
-- Runs only where a route enabled it, i.e. for requests to an upstream whose tool policy restricts
-- something. Reads the metadata Envoy's MCP filter wrote for the request; acts on tools/list only.
-- The route's filter context holds the policies ("rules", read by read_rules) and the backend's name.
-- Its findings go to the dynamic metadata namespace "weir.mcp_tools_list" (outcome, removed, listed,
-- reason), which the access log carries to weir's metrics.

local MCP = "envoy.filters.http.mcp"
local OURS = "weir.mcp_tools_list"
local JWT = "envoy.filters.http.jwt_authn"
local CALLER = "weir.mcp_caller"
local MAX_DEPTH = 128

-- Byte by byte: LuaJIT runs string.byte compiled, while each pattern search costs far more.
local byte = string.byte
local WS = { [32] = true, [9] = true, [13] = true, [10] = true }

local function skip_ws(s, i)
  while WS[byte(s, i)] do i = i + 1 end
  return i
end

local function skip_digits(s, i)
  local b = byte(s, i)
  while b and b >= 48 and b <= 57 do
    i = i + 1
    b = byte(s, i)
  end
  return i
end

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 0x1000), 0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
  end
  return string.char(0xF0 + math.floor(cp / 0x40000), 0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40, 0x80 + cp % 0x40)
end

local ESCAPES = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

-- The string starting at s[i] == '"': its decoded text and the index after it, or nil.
local function read_string(s, i)
  local out, j = {}, i + 1
  while true do
    local k, b = j, byte(s, j)
    while b and b ~= 34 and b ~= 92 and b >= 32 do
      k = k + 1
      b = byte(s, k)
    end
    if not b or b < 32 then return nil end
    if b == 34 and #out == 0 then return s:sub(j, k - 1), k + 1 end  -- no escapes: no table
    out[#out + 1] = s:sub(j, k - 1)
    if b == 34 then return table.concat(out), k + 1 end
    local e = s:sub(k + 1, k + 1)
    if ESCAPES[e] then
      out[#out + 1] = ESCAPES[e]
      j = k + 2
    elseif e == 'u' then
      local hex = s:match('^%x%x%x%x', k + 2)
      if not hex then return nil end
      local cp = tonumber(hex, 16)
      j = k + 6
      if cp >= 0xD800 and cp <= 0xDBFF then
        local low = s:match('^\\u(%x%x%x%x)', j)
        low = low and tonumber(low, 16)
        if low and low >= 0xDC00 and low <= 0xDFFF then
          cp = 0x10000 + (cp - 0xD800) * 0x400 + (low - 0xDC00)
          j = j + 6
        end
      end
      out[#out + 1] = utf8_char(cp)
    else
      return nil
    end
  end
end

local read_value

-- The object starting at s[i] == '{': its members {key, first, last} (last: the index after the
-- value) and the index after it, or nil.
local function read_object(s, i, depth)
  local members = {}
  i = skip_ws(s, i + 1)
  if s:sub(i, i) == '}' then return members, i + 1 end
  while true do
    if s:sub(i, i) ~= '"' then return nil end
    local key, j = read_string(s, i)
    if not key then return nil end
    j = skip_ws(s, j)
    if s:sub(j, j) ~= ':' then return nil end
    local first = skip_ws(s, j + 1)
    local last = read_value(s, first, depth + 1)
    if not last then return nil end
    members[#members + 1] = { key = key, first = first, last = last }
    j = skip_ws(s, last)
    local c = s:sub(j, j)
    if c == '}' then return members, j + 1 end
    if c ~= ',' then return nil end
    i = skip_ws(s, j + 1)
  end
end

-- The array starting at s[i] == '[': its items {first, last} and the index after it, or nil.
local function read_array(s, i, depth)
  local items = {}
  i = skip_ws(s, i + 1)
  if s:sub(i, i) == ']' then return items, i + 1 end
  while true do
    local last = read_value(s, i, depth + 1)
    if not last then return nil end
    items[#items + 1] = { first = i, last = last }
    local j = skip_ws(s, last)
    local c = s:sub(j, j)
    if c == ']' then return items, j + 1 end
    if c ~= ',' then return nil end
    i = skip_ws(s, j + 1)
  end
end

-- The index after the JSON value starting at s[i], or nil when there is none.
read_value = function(s, i, depth)
  if depth > MAX_DEPTH then return nil end
  local c = s:sub(i, i)
  if c == '"' then
    local _, j = read_string(s, i)
    return j
  elseif c == '{' then
    local _, j = read_object(s, i, depth)
    return j
  elseif c == '[' then
    local _, j = read_array(s, i, depth)
    return j
  elseif c == 't' then
    return s:sub(i, i + 3) == "true" and i + 4 or nil
  elseif c == 'f' then
    return s:sub(i, i + 4) == "false" and i + 5 or nil
  elseif c == 'n' then
    return s:sub(i, i + 3) == "null" and i + 4 or nil
  end
  local j = i
  if c == '-' then j = j + 1 end
  local e = skip_digits(s, j)
  if e == j then return nil end
  if s:sub(e, e) == '.' then
    local f = skip_digits(s, e + 1)
    if f == e + 1 then return nil end
    e = f
  end
  local x = s:sub(e, e)
  if x == 'e' or x == 'E' then
    local k = e + 1
    local sign = s:sub(k, k)
    if sign == '+' or sign == '-' then k = k + 1 end
    local f = skip_digits(s, k)
    if f == k then return nil end
    e = f
  end
  return e
end

local function holds_string(value, values)
  return type(value) == "string" and values[value] == true
end

local function split(text, separator)
  local out = {}
  for item in text:gmatch("[^" .. separator .. "]+") do out[#out + 1] = item end
  return out
end

local function unescape(text)
  return (text:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function read_set(text)
  local out = {}
  for _, v in ipairs(split(text, ",")) do out[unescape(v)] = true end
  return out
end

local function read_patterns(text)
  local out = {}
  for _, p in ipairs(split(text, ",")) do out[#out + 1] = split(p, " ") end
  return out
end

-- One grant of a per-caller policy: "WHO>PATTERNS". WHO is "C" and the certificate's subject
-- alternative names, or "J" PROVIDER "/" SUBJECTS "/" CLAIMS (CLAIMS: NAME "=" VALUES joined by
-- "&"); lists are joined by ",", names and values percent-escaped.
local function read_grant(text)
  local who, tools = text:match("^(.-)>(.*)$")
  if who == nil then error("unreadable grant: " .. text) end
  local grant = { tools = read_patterns(tools) }
  if who:sub(1, 1) == "C" then
    grant.sans = read_set(who:sub(2))
    return grant
  end
  local provider, subjects, claims = who:match("^J([^/]*)/([^/]*)/(.*)$")
  if provider == nil then error("unreadable grant: " .. text) end
  grant.provider = unescape(provider)
  if subjects ~= "" then grant.subjects = read_set(subjects) end
  grant.claims = {}
  for claim in claims:gmatch("[^&]+") do
    local name, values = claim:match("^([^=]*)=(.*)$")
    grant.claims[#grant.claims + 1] = { name = unescape(name), values = read_set(values) }
  end
  return grant
end

-- The policies of the filter context's "rules": one line per policy, "A" (it has an allow-list),
-- "N" (it has none) or "P" (tools are granted per caller), then ";" its allowed patterns, ";" its
-- denied patterns, ";" its grants (separated by "|", see read_grant); patterns separated by ",",
-- each a run of Lua patterns separated by " " that must all match.
local function read_rules(rules)
  local policies = {}
  for line in (rules or ""):gmatch("[^\n]+") do
    local mode, allow, deny, grants = line:match("^([ANP]);([^;]*);([^;]*);(.*)$")
    if mode == nil then error("unreadable rules: " .. line) end
    local policy = { denied = read_patterns(deny) }
    if mode ~= "N" then policy.allowed = read_patterns(allow) end
    if mode == "P" then
      policy.grants = {}
      for grant in grants:gmatch("[^|]+") do policy.grants[#policy.grants + 1] = read_grant(grant) end
    end
    policies[#policies + 1] = policy
  end
  return policies
end

-- Whether a claim's value holds one of values: a string equal to one, or a list with one as an item
-- (the JWT filter splits the claims the rules match on at spaces into lists).
local function holds(value, values)
  if type(value) == "string" then return values[value] == true end
  if type(value) == "table" then
    for _, item in pairs(value) do
      if type(item) == "string" and values[item] then return true end
    end
  end
  return false
end

-- Whether the caller (identity: its certificate's SANs, the verified token payloads by provider)
-- is the one a grant names; the same decision as the RBAC principals of weir.xds.mcp.
local function caller_matches(grant, identity)
  if grant.sans then
    for san in pairs(identity.sans) do
      if grant.sans[san] then return true end
    end
    return false
  end
  local payload = identity.jwt[grant.provider]
  if type(payload) ~= "table" then return false end
  if grant.subjects and not holds_string(payload["sub"], grant.subjects) then return false end
  for _, claim in ipairs(grant.claims) do
    if not holds(payload[claim.name], claim.values) then return false end
  end
  return true
end

-- The grants of per-caller policies that this caller has: their patterns join the policy's allowed.
local function apply_identity(policies, identity)
  for _, policy in ipairs(policies) do
    if policy.grants then
      for _, grant in ipairs(policy.grants) do
        if caller_matches(grant, identity) then
          for _, p in ipairs(grant.tools) do policy.allowed[#policy.allowed + 1] = p end
        end
      end
    end
  end
  return policies
end

local function all_match(lua_patterns, name)
  for _, p in ipairs(lua_patterns) do
    if not name:find(p) then return false end
  end
  return true
end

-- Whether every policy allows the tool: no denied pattern matches it, and an allow-list (when the
-- policy has one) does.
local function allowed(policies, name)
  for _, policy in ipairs(policies) do
    for _, p in ipairs(policy.denied) do
      if all_match(p, name) then return false end
    end
    if policy.allowed ~= nil then
      local found = false
      for _, p in ipairs(policy.allowed) do
        if all_match(p, name) then found = true break end
      end
      if not found then return false end
    end
  end
  return true
end

-- One JSON-RPC message (text) with the tools the policies refuse taken out of result.tools.
-- Returns the text (the same string when nothing changed), the names removed, the number of
-- tools listed; or nil and a reason when it is not a JSON-RPC object or its tools cannot be read.
local function filter_message(s, policies)
  local start = skip_ws(s, 1)
  if s:sub(start, start) ~= '{' then return nil, "not a JSON object" end
  local members, after = read_object(s, start, 1)
  if not members then return nil, "not valid JSON" end
  if skip_ws(s, after) <= #s then return nil, "text after the JSON object" end
  local edits, removed, listed = {}, {}, 0
  for _, m in ipairs(members) do
    if m.key == "result" then
      if s:sub(m.first, m.first) ~= '{' then return nil, "result is not an object" end
      local fields = read_object(s, m.first, 2)
      local has_tools = false
      for _, f in ipairs(fields) do
        if f.key == "tools" then
          has_tools = true
          if s:sub(f.first, f.first) ~= '[' then return nil, "result.tools is not an array" end
          local kept = {}
          for _, item in ipairs((read_array(s, f.first, 3))) do
            if s:sub(item.first, item.first) ~= '{' then return nil, "a tool is not an object" end
            local name
            for _, g in ipairs((read_object(s, item.first, 4))) do
              if g.key == "name" then -- the last one counts, as for the client's parser
                name = s:sub(g.first, g.first) == '"' and read_string(s, g.first) or false
              end
            end
            if type(name) ~= "string" then return nil, "a tool without a string name" end
            listed = listed + 1
            if allowed(policies, name) then
              kept[#kept + 1] = s:sub(item.first, item.last - 1)
            else
              removed[#removed + 1] = name
            end
          end
          edits[#edits + 1] = { f.first, f.last, "[" .. table.concat(kept, ",") .. "]" }
        end
      end
      if not has_tools then return nil, "result has no tools" end
    end
  end
  if #removed == 0 then return s, removed, listed end
  local out, at = {}, 1
  for _, edit in ipairs(edits) do
    out[#out + 1] = s:sub(at, edit[1] - 1)
    out[#out + 1] = edit[3]
    at = edit[2]
  end
  out[#out + 1] = s:sub(at)
  return table.concat(out), removed, listed
end

-- A text/event-stream body with each event's data filtered as one JSON-RPC message. Events
-- without data (a stream's priming event) pass; fields other than data are kept as they were.
local function filter_events(s, policies)
  local out, removed, listed = {}, {}, 0
  local event = {}  -- the lines of the current event: {text, terminator, data or nil}
  local function flush()
    local data, any = {}, false
    for _, line in ipairs(event) do
      if line.data then data[#data + 1] = line.data any = true end
    end
    local text = table.concat(data, "\n")
    local changed = false
    if any and text ~= "" then
      local filtered, names, count = filter_message(text, policies)
      if not filtered then return names end
      listed = listed + count
      for _, n in ipairs(names) do removed[#removed + 1] = n end
      if filtered ~= text then
        changed = true
        local wrote = false
        for _, line in ipairs(event) do
          if not line.data then
            out[#out + 1] = line.text .. line.term
          elseif not wrote then
            out[#out + 1] = "data: " .. filtered:gsub("\n", "\ndata: ") .. line.term
            wrote = true
          end
        end
      end
    end
    if not changed then
      for _, line in ipairs(event) do out[#out + 1] = line.text .. line.term end
    end
    event = {}
  end
  local at = 1
  while at <= #s do
    local k = s:find("[\r\n]", at)
    local text, term
    if not k then
      text, term, at = s:sub(at), "", #s + 1
    else
      text = s:sub(at, k - 1)
      term = s:sub(k, k + 1) == "\r\n" and "\r\n" or s:sub(k, k)
      at = k + #term
    end
    if text == "" then
      local failed = flush()
      if failed then return nil, failed end
      out[#out + 1] = term
    else
      local data = text:match("^data: ?(.*)$")
      if text == "data" then data = "" end
      event[#event + 1] = { text = text, term = term, data = data }
    end
  end
  local failed = flush()
  if failed then return nil, failed end
  return table.concat(out), removed, listed
end

local function json_string(text)
  return '"' .. text:gsub('[%c"\\]', function(c)
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function json_id(id)
  if type(id) == "string" then return json_string(id) end
  if type(id) == "number" then
    if id == math.floor(id) and math.abs(id) < 2 ^ 53 then return string.format("%d", id) end
    return tostring(id)
  end
  return "null"
end

function envoy_on_request(handle)
  local mcp = handle:streamInfo():dynamicMetadata():get(MCP)
  if mcp ~= nil and mcp["method"] == "tools/list" then
    -- A compressed list could not be read: ask for it as it is.
    handle:headers():remove("accept-encoding")
  end
end

-- The caller's verified identity: its client certificate's URI and DNS SANs (as Envoy's RBAC
-- "authenticated" reads them), and the payloads the JWT filter wrote, by provider.
local function caller_identity(handle)
  local identity = { sans = {}, jwt = {} }
  local ssl = handle:streamInfo():downstreamSslConnection()
  local marks = handle:streamInfo():dynamicMetadata():get(CALLER)
  -- An HTTPS server that lets unverified certificates in marks its requests: SANs prove nothing there.
  local unverified = marks ~= nil and marks["unverified_certificate"] == true
  if ssl ~= nil and not unverified then
    for _, san in pairs(ssl:uriSanPeerCertificate() or {}) do identity.sans[san] = true end
    for _, san in pairs(ssl:dnsSansPeerCertificate() or {}) do identity.sans[san] = true end
  end
  local tokens = handle:streamInfo():dynamicMetadata():get(JWT)
  if tokens ~= nil then
    for provider, payload in pairs(tokens) do identity.jwt[tostring(provider)] = payload end
  end
  return identity
end

-- The answer's body filtered (or the reason it cannot be), from plain values only.
local function filter_body(status, media, encoding, body, rules, identity)
  local policies = apply_identity(read_rules(rules), identity)
  if encoding ~= "identity" then return nil, "a response with Content-Encoding " .. encoding end
  if media == "application/json" then return filter_message(body, policies) end
  if media == "text/event-stream" then return filter_events(body, policies) end
  return nil, "a response of type " .. (media ~= "" and media or "(none)")
end

function envoy_on_response(handle)
  local mcp = handle:streamInfo():dynamicMetadata():get(MCP)
  if mcp == nil or mcp["method"] ~= "tools/list" then return end
  local id = mcp["id"]
  -- body() waits for the whole answer; objects taken before it are not valid after it.
  local buffered = handle:body()
  local headers = handle:headers()
  local status = tonumber(headers:get(":status")) or 0
  local media = (headers:get("content-type") or ""):lower():match("^%s*([^;%s]*)")
  local encoding = (headers:get("content-encoding") or "identity"):lower()
  local body = buffered and buffered:getBytes(0, buffered:length()) or ""
  -- Read through pairs: indexing Envoy 1.40's filter context table by key finds nothing.
  local context = {}
  for k, v in pairs(handle:filterContext()) do context[tostring(k)] = v end
  -- A caller whose identity cannot be read is treated as unidentified: fewer tools, never more.
  local read, identity = pcall(caller_identity, handle)
  if not read then identity = { sans = {}, jwt = {} } end
  local ok, filtered, removed, listed =
    pcall(filter_body, status, media, encoding, body, context["rules"], identity)
  if not ok then
    filtered, removed = nil, "an error reading it: " .. tostring(filtered)
  end
  local metadata = handle:streamInfo():dynamicMetadata()
  if filtered == nil then
    metadata:set(OURS, "reason", removed)
    if status < 200 or status > 299 then
      -- An error status: a client takes no tools from what it cannot read either.
      metadata:set(OURS, "outcome", "passed")
      return
    end
    metadata:set(OURS, "outcome", "refused")
    local message = "tools/list refused: the gateway could not read the server's answer (" .. removed
      .. ") to apply the BackendMCPPolicy of " .. (context["backend"] or "its backend")
    local reply = '{"jsonrpc":"2.0","id":' .. json_id(id) .. ',"error":{"code":-32603,"message":'
      .. json_string(message) .. ',"data":{"reason":' .. json_string(removed) .. '}}}'
    headers:replace(":status", "502")
    headers:replace("content-type", "application/json")
    headers:remove("content-encoding")
    if buffered then
      buffered:setBytes(reply)
      headers:replace("content-length", tostring(#reply))
    else
      headers:replace("content-length", "0")
    end
    return
  end
  metadata:set(OURS, "listed", listed)
  metadata:set(OURS, "removed", #removed)
  if #removed == 0 then
    metadata:set(OURS, "outcome", "unchanged")
    return
  end
  metadata:set(OURS, "outcome", "filtered")
  metadata:set(OURS, "tools", table.concat(removed, ","))
  buffered:setBytes(filtered)
  if headers:get("content-length") ~= nil then headers:replace("content-length", tostring(#filtered)) end
end
