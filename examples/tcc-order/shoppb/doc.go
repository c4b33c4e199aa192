// Package shoppb is the Go code generated from shop.proto: the tcc-order example's Stock and
// Account participants (a method per TCC and saga op) and its Orders service, for
// `-transport grpc`. The generated files are committed; `make proto` makes them again.
package shoppb
