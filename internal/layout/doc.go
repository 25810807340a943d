// Package layout holds the tests that keep kfsm's library in pieces a
// reader can take in: package fsm under a size that one idea fills, no
// file of the library that holds two, and no function of the engine
// longer than a screen or two. A mechanism that outgrows them moves to a
// package of its own under fsm/internal, as STYLE's seams say.
package layout
