// Command kfsm-vet is kfsm's analyzer (package fsmvet) as go vet's tool:
//
//	go install github.com/kfsm/kfsm/cmd/kfsm-vet@latest
//	go vet -vettool=$(which kfsm-vet) ./...
//
// go vet starts its tool once for every package that it vets and every
// package that those import, a thousand or so for an operator. This
// program links the analyzer and little else, so it starts in a few
// milliseconds, where the kfsm command, which answers go vet too, starts
// its dashboard's layout engine first. kfsm vet runs the same analyzer
// without go vet.
package main

import (
	"os"

	"github.com/kfsm/kfsm/cmd/internal/vettool"
)

func main() {
	vettool.Main(os.Args[1:])
}
