local s = string.rep("a", 2^24)
while true do local c = s .. "x" end
