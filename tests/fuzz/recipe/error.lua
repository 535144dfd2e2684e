data { train = "x.csv" }
cluster { prot = 7164 }
