module github.com/kfsm/kfsm/tools/release

go 1.26.0

require golang.org/x/mod v0.42.0

require github.com/google/go-cmp v0.7.0
