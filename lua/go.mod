module github.com/ffscan/ffscan/lua

go 1.26.0

toolchain go1.26.8

require (
	github.com/ffscan/ffscan/sdk v0.0.0
	github.com/stretchr/testify v1.12.1
	github.com/valkey-io/valkey-go v1.0.79
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The library's tests start real servers with the SDK's starter
// (sdk/testserver); the SDK in turn loads this library. The cycle is
// test-only: no production package of lua imports the SDK.
replace github.com/ffscan/ffscan/sdk => ../sdk

replace github.com/ffscan/ffscan/keys => ../keys
