// Package leancache holds what fsm's LeanCache is made of: a transform
// that runs on every object a controller-runtime cache stores, after the
// ones its options give (transform.go); a table that keeps one copy of
// each string that many objects repeat, and of each label map that one
// parent's children repeat (intern.go); and a REST mapper that remembers
// the mappings that the cache asks for on every read (restmap.go). And
// a cache that says which namespaces it watches (transform.go), so that
// fsm lists from the API server those alone.
//
// A controller-runtime cache that serves some namespaces asks its REST
// mapper whether an object's kind is namespaced on every Get and List.
// controller-runtime's mapper answers from what it has discovered, but
// builds the answer anew each time, through every API group it knows: in
// kfsm's benchmark, a seventh of everything an operator allocated.
package leancache
