module goka-py/bench/slowhttp

go 1.21
