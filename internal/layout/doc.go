// Package layout holds the tests that keep kfsm's library in pieces a
// reader can take in: the engine (fsm and fsm/internal) under a bound of
// code lines, comments and blank lines not counted, no file of the
// library that holds two ideas, and no function of the engine longer
// than a screen or two. When a bound pinches, the code is made simpler;
// moving it to another folder does not help, since the engine's bound
// counts both.
package layout
