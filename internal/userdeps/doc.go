// Package userdeps holds the test that keeps kfsm light for its users: a
// module that imports only the library (fsm, graph, cluster, fsmtest, storage)
// gets none of the dependencies of kfsm's command, examples and
// CloudEvents sink, which are modules of their own.
package userdeps
