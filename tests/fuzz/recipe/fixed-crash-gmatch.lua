local it = ("a"):rep(1e6):gmatch(("a?"):rep(1e6))
local ok = pcall(it)
local x = it()
