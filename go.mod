module github.com/canifinetune/canifinetune

go 1.26

require (
	github.com/alecthomas/kong v1.17.0
	github.com/google/go-cmp v0.7.0
)
