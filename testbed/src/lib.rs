//! Network-namespace leaf-spine fabric and real-mechanism fault injection for testing rocemesh.
