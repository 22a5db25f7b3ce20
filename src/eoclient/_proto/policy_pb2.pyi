from eoclient._proto import expr_pb2 as _expr_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Policy(_message.Message):
    __slots__ = ("version", "bindings", "audit_configs", "etag")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    version: int
    bindings: _containers.RepeatedCompositeFieldContainer[Binding]
    audit_configs: _containers.RepeatedCompositeFieldContainer[AuditConfig]
    etag: bytes
    def __init__(self, version: _Optional[int] = ..., bindings: _Optional[_Iterable[_Union[Binding, _Mapping]]] = ..., audit_configs: _Optional[_Iterable[_Union[AuditConfig, _Mapping]]] = ..., etag: _Optional[bytes] = ...) -> None: ...

class Binding(_message.Message):
    __slots__ = ("role", "members", "condition")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    role: str
    members: _containers.RepeatedScalarFieldContainer[str]
    condition: _expr_pb2.Expr
    def __init__(self, role: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., condition: _Optional[_Union[_expr_pb2.Expr, _Mapping]] = ...) -> None: ...

class AuditConfig(_message.Message):
    __slots__ = ("service", "audit_log_configs")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    AUDIT_LOG_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    service: str
    audit_log_configs: _containers.RepeatedCompositeFieldContainer[AuditLogConfig]
    def __init__(self, service: _Optional[str] = ..., audit_log_configs: _Optional[_Iterable[_Union[AuditLogConfig, _Mapping]]] = ...) -> None: ...

class AuditLogConfig(_message.Message):
    __slots__ = ("log_type", "exempted_members")
    class LogType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        LOG_TYPE_UNSPECIFIED: _ClassVar[AuditLogConfig.LogType]
        ADMIN_READ: _ClassVar[AuditLogConfig.LogType]
        DATA_WRITE: _ClassVar[AuditLogConfig.LogType]
        DATA_READ: _ClassVar[AuditLogConfig.LogType]
    LOG_TYPE_UNSPECIFIED: AuditLogConfig.LogType
    ADMIN_READ: AuditLogConfig.LogType
    DATA_WRITE: AuditLogConfig.LogType
    DATA_READ: AuditLogConfig.LogType
    LOG_TYPE_FIELD_NUMBER: _ClassVar[int]
    EXEMPTED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    log_type: AuditLogConfig.LogType
    exempted_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, log_type: _Optional[_Union[AuditLogConfig.LogType, str]] = ..., exempted_members: _Optional[_Iterable[str]] = ...) -> None: ...
