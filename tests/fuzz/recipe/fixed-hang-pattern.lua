local x = string.rep("a", 30000):find(".-.-.-.-b")
