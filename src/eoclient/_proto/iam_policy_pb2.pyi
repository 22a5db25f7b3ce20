from eoclient._proto import policy_pb2 as _policy_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetIamPolicyRequest(_message.Message):
    __slots__ = ("resource", "policy", "update_mask")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    resource: str
    policy: _policy_pb2.Policy
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, resource: _Optional[str] = ..., policy: _Optional[_Union[_policy_pb2.Policy, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetIamPolicyRequest(_message.Message):
    __slots__ = ("resource", "options")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    options: GetPolicyOptions
    def __init__(self, resource: _Optional[str] = ..., options: _Optional[_Union[GetPolicyOptions, _Mapping]] = ...) -> None: ...

class GetPolicyOptions(_message.Message):
    __slots__ = ("requested_policy_version",)
    REQUESTED_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    requested_policy_version: int
    def __init__(self, requested_policy_version: _Optional[int] = ...) -> None: ...

class TestIamPermissionsRequest(_message.Message):
    __slots__ = ("resource", "permissions")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    permissions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource: _Optional[str] = ..., permissions: _Optional[_Iterable[str]] = ...) -> None: ...

class TestIamPermissionsResponse(_message.Message):
    __slots__ = ("permissions",)
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    permissions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, permissions: _Optional[_Iterable[str]] = ...) -> None: ...
