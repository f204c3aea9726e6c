"""The shared attention core: the only home of attention layers. Domain packages import from here;
this package imports no domain."""
