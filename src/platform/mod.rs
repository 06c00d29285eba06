//! OS-specific code behind one interface (to be written).
